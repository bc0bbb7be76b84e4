/* burst.c: a thread that sleeps and runs in short bursts, for the accuracy of such threads'
 * time (the switch path the scheduler charges a thread before its `sched_switch` record
 * begins: BENCHMARKS.md, 2026-12-05). Over and over for SECONDS: nanosleep SLEEP_US, then spin
 * SPIN_US of its own CPU clock. Prints its CPU clock's total over the loop:
 *
 *   gcc -O2 -o burst tests/benches/cost-model/burst.c
 *   fsprof run --rate 2000 -o DIR -- ./burst SECONDS SLEEP_US SPIN_US
 *
 * then compare DIR/profile.json's active time (its samples' `active_ns`) with `cpu_ms`. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static double wall_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: burst SECONDS SLEEP_US SPIN_US\n");
        return 2;
    }
    double end = wall_ms() + atof(argv[1]) * 1e3;
    long sleep_us = atol(argv[2]), spin_us = atol(argv[3]);
    double start = cpu_ms();
    while (wall_ms() < end) {
        struct timespec pause = {sleep_us / 1000000, (sleep_us % 1000000) * 1000};
        nanosleep(&pause, NULL);
        double from = cpu_ms();
        while (cpu_ms() - from < spin_us / 1e3) {
        }
    }
    printf("cpu_ms %.1f\n", cpu_ms() - start);
    return 0;
}
