/* whatif_barrier.c: the ground truth of `fsprof what-if` for C threads that meet at a
 * `pthread_barrier_wait` (tests/tests/what_if.rs): in each phase one thread solves (`solve`, 20
 * units of work, about 2 ms) while the other checks (`check`, 12 units), then both wait at the
 * barrier for the other. A phase takes as long as its longer half: `solve` 20% faster buys
 * about 20%, 50% faster only 40% (then `check` is the longer), and `check` faster buys nothing.
 * The last thread to arrive wakes the other inside libc (glibc's barrier makes its futex calls
 * itself). Phases a few times what-if's looks (a millisecond of a thread's CPU time) are where
 * the barrier's part shows: much longer, the delays paid at the looks fall within each phase's
 * slack; as short as a look, its lump of delay lands while the other thread waits, and is
 * forgiven (BENCHMARKS.md). Marked through the agent's C ABI; work is counted in steps, not
 * timed.
 *
 *   whatif_barrier [PHASES] [solve=PERCENT] [check=PERCENT]
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

static const fsprof_feature *solve_feature, *check_feature;
static double solve_units = 20.0, check_units = 12.0;
static long phases = 120;
static pthread_barrier_t barrier;
static volatile uint64_t sink;

static uint64_t work(double units, uint64_t seed) {
    volatile uint64_t x = seed | 1;
    for (uint64_t i = 0; i < (uint64_t)(units * UNIT); i++)
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return x;
}

static void *checker(void *unused) {
    (void)unused;
    for (long i = 0; i < phases; i++) {
        fsprof_mark(check_feature, "phases");
        sink += work(check_units, (uint64_t)i);
        fsprof_unmark();
        pthread_barrier_wait(&barrier);
    }
    return NULL;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "solve=", 6)) solve_units *= 1 - atof(argv[i] + 6) / 100;
        else if (!strncmp(argv[i], "check=", 6)) check_units *= 1 - atof(argv[i] + 6) / 100;
        else phases = atol(argv[i]);
    }
    solve_feature = fsprof_feature_new("solve");
    check_feature = fsprof_feature_new("check");
    pthread_barrier_init(&barrier, NULL, 2);
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    pthread_t checking;
    pthread_create(&checking, NULL, checker, NULL);
    for (long i = 0; i < phases; i++) {
        fsprof_mark(solve_feature, "phases");
        sink += work(solve_units, (uint64_t)i);
        fsprof_unmark();
        pthread_barrier_wait(&barrier);
    }
    pthread_join(checking, NULL);
    clock_gettime(CLOCK_MONOTONIC, &end);
    printf("%ld %llu\n", (long)((end.tv_sec - start.tv_sec) * 1000 + (end.tv_nsec - start.tv_nsec) / 1000000),
           (unsigned long long)(sink & 1));
    return 0;
}
