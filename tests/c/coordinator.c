/* coordinator.c: a coordinator thread that hands batches to two workers and waits for them on a
 * condition variable, as xz -T and many thread pools do. The workers spend 60% of each 10 ms
 * batch in their own `work` mark (through fsprof.h) and 40% unmarked; the coordinator only waits.
 * The truth's total is the workers' lives less the time they were blocked waiting for a batch
 * (until it was handed out; their wake-up after that counts, as any runnable time does), plus
 * the coordinator's time running or waiting for a CPU (its wake-ups, twice a batch, while both
 * workers spin on the machine's two CPUs: active time like any other, which fsprof counts).
 *
 *   coordinator SECONDS [--truth FILE]
 *
 * Writes the truth in the format of tests/src/lib.rs (`Truth::to_json`). */
#include "clock.h"
#include "fsprof.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static unsigned batch;    /* the batch handed out */
static unsigned done;     /* workers done with it */
static int finished;
static double handed_at;  /* when it was handed out, or the end announced */
static const fsprof_feature *work;

struct worker {
    double work_ms, blocked_ms, life_ms;
};

static void *worker(void *arg) {
    struct worker *truth = arg;
    double born = now_ms();
    unsigned seen = 0;
    for (;;) {
        pthread_mutex_lock(&lock);
        double waiting = now_ms();
        while (batch == seen && !finished) pthread_cond_wait(&changed, &lock);
        if (handed_at > waiting) truth->blocked_ms += handed_at - waiting;
        int end = finished;
        seen = batch;
        pthread_mutex_unlock(&lock);
        if (end) break;

        double t0 = now_ms();
        fsprof_mark(work, "batch");
        spin_us(6000);
        fsprof_unmark();
        truth->work_ms += now_ms() - t0;
        spin_us(4000);

        pthread_mutex_lock(&lock);
        done++;
        pthread_cond_broadcast(&changed);
        pthread_mutex_unlock(&lock);
    }
    truth->life_ms = now_ms() - born;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: coordinator SECONDS [--truth FILE]\n");
        return 2;
    }
    double seconds = atof(argv[1]);
    const char *truth_path = argc >= 4 && strcmp(argv[2], "--truth") == 0 ? argv[3] : NULL;
    work = fsprof_feature_new("work");
    struct worker truths[2] = {{0}};
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) pthread_create(&threads[i], NULL, worker, &truths[i]);
    double end = now_ms() + seconds * 1000;
    pthread_mutex_lock(&lock);
    while (now_ms() < end) {
        batch++;
        done = 0;
        handed_at = now_ms();
        pthread_cond_broadcast(&changed);
        while (done < 2) pthread_cond_wait(&changed, &lock); /* the coordinator's whole job */
    }
    finished = 1;
    handed_at = now_ms();
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
    if (truth_path) {
        double work_ms = 0, total = 0;
        for (int i = 0; i < 2; i++) {
            work_ms += truths[i].work_ms;
            total += truths[i].life_ms - truths[i].blocked_ms;
        }
        /* The coordinator's time running or waiting for a CPU (schedstat: run, wait). */
        unsigned long long run_ns = 0, wait_ns = 0;
        FILE *stat = fopen("/proc/thread-self/schedstat", "r");
        if (stat) {
            if (fscanf(stat, "%llu %llu", &run_ns, &wait_ns) != 2) run_ns = wait_ns = 0;
            fclose(stat);
        }
        total += (run_ns + wait_ns) / 1e6;
        FILE *f = fopen(truth_path, "w");
        if (!f) {
            perror(truth_path);
            return 1;
        }
        fprintf(f,
                "{\"total_ms\": %f, \"extra\": {}, \"features\": {\"work\": {\"ms\": %f, "
                "\"instances\": {\"batch\": %f}}}}\n",
                total, work_ms, work_ms);
        fclose(f);
    }
    return 0;
}
