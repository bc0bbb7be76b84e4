/* rare_threads.c: threads that run a few milliseconds now and then, between fsprof's ticks, in
 * a program nobody marked. The main thread hashes for SECONDS (one CPU busy: perf carries its
 * time, and fsprof's ticks come every 40 ms or so); each of THREADS other threads hashes for
 * BURST_MS of its own CPU time every PAUSE_MS, sleeping between (a CPU a fraction of a percent
 * of the time; the threads' bursts spread over the pause), so that a tick seldom finds one
 * running. When all have stopped it prints, per thread, "thread TID CPU_MS WAIT_MS": its whole
 * time on a CPU and waiting for one (the kernel's `schedstat` of the thread), and the same for
 * the main thread as "main PID CPU_MS WAIT_MS".
 * Usage: rare_threads SECONDS THREADS BURST_MS PAUSE_MS */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double seconds, burst_ms, pause_ms;
static int threads;
static double started;

static double clock_ms(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Hashes until `ms` of this thread's CPU time have passed. */
static void __attribute__((noinline)) spin_for(double ms) {
    double start = clock_ms(CLOCK_THREAD_CPUTIME_ID);
    volatile unsigned long h = 1;
    while (clock_ms(CLOCK_THREAD_CPUTIME_ID) - start < ms) {
        for (int i = 0; i < 20000; i++) h = h * 6364136223846793005UL + 1442695040888963407UL;
    }
}

struct result {
    long tid;
    int index;
    double cpu_ms, wait_ms;
};

/* The calling thread's time on a CPU and waiting for one so far, ms (`schedstat`). */
static void own_times(double *cpu_ms, double *wait_ms) {
    unsigned long long on = 0, waiting = 0;
    FILE *file = fopen("/proc/thread-self/schedstat", "r");
    if (file == NULL || fscanf(file, "%llu %llu", &on, &waiting) != 2) {
        fprintf(stderr, "rare_threads: no /proc/thread-self/schedstat\n");
        exit(1);
    }
    fclose(file);
    *cpu_ms = on / 1e6;
    *wait_ms = waiting / 1e6;
}

static void *rare(void *arg) {
    struct result *result = arg;
    result->tid = syscall(SYS_gettid);
    struct timespec pause = {(time_t)(pause_ms / 1e3), (long)((pause_ms - 1e3 * (long)(pause_ms / 1e3)) * 1e6)};
    /* Its first burst a share of a pause in (the threads' bursts spread), the others a pause
     * apart. */
    double first_ms = pause_ms * (result->index + 0.5) / threads;
    struct timespec first = {0, (long)(first_ms * 1e6)};
    nanosleep(&first, NULL);
    while (clock_ms(CLOCK_MONOTONIC) - started < seconds * 1e3 - pause_ms) {
        spin_for(burst_ms);
        nanosleep(&pause, NULL);
    }
    own_times(&result->cpu_ms, &result->wait_ms);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: rare_threads SECONDS THREADS BURST_MS PAUSE_MS\n");
        return 2;
    }
    seconds = atof(argv[1]);
    threads = atoi(argv[2]);
    burst_ms = atof(argv[3]);
    pause_ms = atof(argv[4]);
    if (threads < 1 || threads > 64 || burst_ms <= 0 || pause_ms <= 0 || pause_ms >= 1000) {
        fprintf(stderr, "rare_threads: 1-64 threads, a burst above 0 and a pause of 0-1000 ms\n");
        return 2;
    }
    started = clock_ms(CLOCK_MONOTONIC);
    pthread_t ids[64];
    struct result results[64];
    for (int i = 0; i < threads; i++) {
        results[i].index = i;
        pthread_create(&ids[i], NULL, rare, &results[i]);
    }
    while (clock_ms(CLOCK_MONOTONIC) - started < seconds * 1e3) spin_for(1);
    for (int i = 0; i < threads; i++) pthread_join(ids[i], NULL);
    for (int i = 0; i < threads; i++)
        printf("thread %ld %.3f %.3f\n", results[i].tid, results[i].cpu_ms, results[i].wait_ms);
    double cpu_ms, wait_ms;
    own_times(&cpu_ms, &wait_ms);
    printf("main %ld %.3f %.3f\n", (long)getpid(), cpu_ms, wait_ms);
    return 0;
}
