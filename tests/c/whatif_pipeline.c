/* whatif_pipeline.c: the ground truth of `fsprof what-if` for C threads synchronised by pthread
 * mutexes and condition variables (tests/tests/what_if.rs): a `decode` thread (3 units of work
 * an item) hands items through a bounded queue of 4 to a `render` thread (1 unit), marked through
 * the agent's C ABI. Decode is the bottleneck: a speedup of it buys its share, one of render
 * buys nothing. Work is counted in steps, not timed.
 *
 *   whatif_pipeline [ITEMS] [decode=PERCENT] [render=PERCENT]
 *
 * A FEATURE=PERCENT argument cuts that feature's work by PERCENT (the knob). Prints its own wall
 * time in ms. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fsprof.h"

#define UNIT 100000ULL
#define CAPACITY 4

static const fsprof_feature *decode_feature, *render_feature;
static double decode_units = 3.0, render_units = 1.0;
static long items = 1000;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER, not_full = PTHREAD_COND_INITIALIZER;
static uint64_t queue[CAPACITY];
static int head, count, done;

static uint64_t work(double units, uint64_t seed) {
    volatile uint64_t x = seed | 1;
    for (uint64_t i = 0; i < (uint64_t)(units * UNIT); i++)
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return x;
}

static void *decode(void *unused) {
    (void)unused;
    for (long i = 0; i < items; i++) {
        fsprof_mark(decode_feature, "items");
        uint64_t item = work(decode_units, (uint64_t)i);
        fsprof_unmark();
        pthread_mutex_lock(&lock);
        while (count == CAPACITY) pthread_cond_wait(&not_full, &lock);
        queue[(head + count) % CAPACITY] = item;
        count++;
        pthread_cond_signal(&not_empty);
        pthread_mutex_unlock(&lock);
    }
    pthread_mutex_lock(&lock);
    done = 1;
    pthread_cond_broadcast(&not_empty);
    pthread_mutex_unlock(&lock);
    return NULL;
}

static void *render(void *result) {
    uint64_t sum = 0;
    for (;;) {
        pthread_mutex_lock(&lock);
        while (count == 0 && !done) pthread_cond_wait(&not_empty, &lock);
        if (count == 0) {
            pthread_mutex_unlock(&lock);
            break;
        }
        uint64_t item = queue[head];
        head = (head + 1) % CAPACITY;
        count--;
        pthread_cond_signal(&not_full);
        pthread_mutex_unlock(&lock);
        fsprof_mark(render_feature, "items");
        sum += work(render_units, item);
        fsprof_unmark();
    }
    *(uint64_t *)result = sum;
    return NULL;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "decode=", 7)) decode_units *= 1 - atof(argv[i] + 7) / 100;
        else if (!strncmp(argv[i], "render=", 7)) render_units *= 1 - atof(argv[i] + 7) / 100;
        else items = atol(argv[i]);
    }
    decode_feature = fsprof_feature_new("decode");
    render_feature = fsprof_feature_new("render");
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    pthread_t producer, consumer;
    uint64_t sum = 0;
    pthread_create(&producer, NULL, decode, NULL);
    pthread_create(&consumer, NULL, render, &sum);
    pthread_join(producer, NULL);
    pthread_join(consumer, NULL);
    clock_gettime(CLOCK_MONOTONIC, &end);
    printf("%ld %llu\n", (long)((end.tv_sec - start.tv_sec) * 1000 + (end.tv_nsec - start.tv_nsec) / 1000000),
           (unsigned long long)(sum & 1));
    return 0;
}
