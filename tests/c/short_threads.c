/* short_threads.c: threads born and gone between two of fsprof's ticks, in a program nobody
 * marked. The main thread runs `main_work` for MS ms of its own CPU time, then starts a thread
 * that runs `short_work` for MS ms of its CPU time and ends, and joins it; again and again for
 * SECONDS. Each thread lives a few milliseconds: while perf samples, fsprof's ticks are too rare
 * to find most of them. Prints "threads N short_ms X main_ms Y main_cpu_ms Z": the threads
 * made, the CPU time each function ran and the main thread's whole CPU time
 * (CLOCK_THREAD_CPUTIME_ID); with SHORT_THREADS_EACH set in the
 * environment, each thread also prints "thread TID MS" to stderr as it ends.
 * Usage: short_threads SECONDS MS */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double clock_ms(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Two variables, so that the compiler does not fold the two functions into one. */
static double short_ms_each, main_ms_each;

/* Hashes until `ms` of this thread's CPU time have passed; returns the time it ran. */
static double __attribute__((noinline)) spin_for(double ms) {
    double start = clock_ms(CLOCK_THREAD_CPUTIME_ID), now = start;
    volatile unsigned long h = 1;
    while (now - start < ms) {
        for (int i = 0; i < 20000; i++) h = h * 6364136223846793005UL + 1442695040888963407UL;
        now = clock_ms(CLOCK_THREAD_CPUTIME_ID);
    }
    return now - start;
}

/* Each calls `spin_for` as a call, not a jump (the barrier after it), so that it is on the
 * stack. */
static double __attribute__((noinline)) short_work(void) {
    double ran = spin_for(short_ms_each);
    __asm__ volatile("" ::: "memory");
    return ran;
}

static double __attribute__((noinline)) main_work(void) {
    double ran = spin_for(main_ms_each);
    __asm__ volatile("" ::: "memory");
    return ran;
}

static void *thread_main(void *result) {
    *(double *)result = short_work();
    if (getenv("SHORT_THREADS_EACH"))
        fprintf(stderr, "thread %ld %.3f\n", (long)syscall(SYS_gettid), *(double *)result);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: short_threads SECONDS MS\n");
        return 2;
    }
    double until = clock_ms(CLOCK_MONOTONIC) + atof(argv[1]) * 1e3;
    short_ms_each = main_ms_each = atof(argv[2]);
    double short_ms = 0, main_ms = 0;
    int threads = 0;
    while (clock_ms(CLOCK_MONOTONIC) < until) {
        main_ms += main_work();
        pthread_t thread;
        double ran = 0;
        if (pthread_create(&thread, NULL, thread_main, &ran) != 0) return 1;
        pthread_join(thread, NULL);
        short_ms += ran;
        threads++;
    }
    printf("threads %d short_ms %.1f main_ms %.1f main_cpu_ms %.1f\n", threads, short_ms, main_ms,
           clock_ms(CLOCK_THREAD_CPUTIME_ID));
    return 0;
}
