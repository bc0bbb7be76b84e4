/* whatif_semaphores.c: the ground truth of `fsprof what-if` for C threads that hand work over by
 * POSIX semaphores (tests/tests/what_if.rs): a client thread prepares each request (`prepare`, 1
 * unit of work), posts it and waits for the answer; a server thread waits for a request, answers
 * it (`handle`, 2 units) and posts the answer. Every wait is a `sem_wait` and every wake-up a
 * `sem_post`, on the critical path: a speedup of either feature buys its share of the time. Marked
 * through the agent's C ABI; work is counted in steps, not timed.
 *
 *   whatif_semaphores [REQUESTS] [prepare=PERCENT] [handle=PERCENT]
 *
 * A FEATURE=PERCENT argument cuts that feature's work by PERCENT (the knob). Prints its own wall
 * time in ms. */
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fsprof.h"

#define UNIT 100000ULL

static const fsprof_feature *prepare_feature, *handle_feature;
static double prepare_units = 1.0, handle_units = 2.0;
static long requests = 1000;
static sem_t request_ready, answer_ready;
static uint64_t request, answer;

static uint64_t work(double units, uint64_t seed) {
    volatile uint64_t x = seed | 1;
    for (uint64_t i = 0; i < (uint64_t)(units * UNIT); i++)
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return x;
}

static void *server(void *unused) {
    (void)unused;
    for (long i = 0; i < requests; i++) {
        sem_wait(&request_ready);
        fsprof_mark(handle_feature, "requests");
        answer = work(handle_units, request);
        fsprof_unmark();
        sem_post(&answer_ready);
    }
    return NULL;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "prepare=", 8)) prepare_units *= 1 - atof(argv[i] + 8) / 100;
        else if (!strncmp(argv[i], "handle=", 7)) handle_units *= 1 - atof(argv[i] + 7) / 100;
        else requests = atol(argv[i]);
    }
    prepare_feature = fsprof_feature_new("prepare");
    handle_feature = fsprof_feature_new("handle");
    sem_init(&request_ready, 0, 0);
    sem_init(&answer_ready, 0, 0);
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    pthread_t answering;
    pthread_create(&answering, NULL, server, NULL);
    uint64_t sum = 0;
    for (long i = 0; i < requests; i++) {
        fsprof_mark(prepare_feature, "requests");
        request = work(prepare_units, (uint64_t)i);
        fsprof_unmark();
        sem_post(&request_ready);
        sem_wait(&answer_ready);
        sum += answer;
    }
    pthread_join(answering, NULL);
    clock_gettime(CLOCK_MONOTONIC, &end);
    printf("%ld %llu\n", (long)((end.tv_sec - start.tv_sec) * 1000 + (end.tv_nsec - start.tv_nsec) / 1000000),
           (unsigned long long)(sum & 1));
    return 0;
}
