/* clock.h: the ground-truth C targets' clock (monotonic milliseconds) and busy wait. */
#ifndef FSPROF_TESTS_CLOCK_H
#define FSPROF_TESTS_CLOCK_H

#include <time.h>

static inline double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Spins (no system call but the clock's, usually the vDSO's) for `us` microseconds. */
static inline void spin_us(unsigned us) {
    double end = now_ms() + us / 1000.0;
    volatile unsigned long x = 1;
    while (now_ms() < end)
        for (int i = 0; i < 64; i++) x = x * 6364136223846793005UL + 1;
}

#endif
