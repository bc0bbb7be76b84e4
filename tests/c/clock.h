/* clock.h: the ground-truth C targets' clock (monotonic milliseconds) and busy wait. */
#ifndef FSPROF_TESTS_CLOCK_H
#define FSPROF_TESTS_CLOCK_H

#include <fcntl.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static inline double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* The calling thread's CPU time, in milliseconds. */
static inline double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* The calling thread's schedstat: its time on a CPU and its time queued for one, in ns;
 * whether it was read. The thread's own file, opened once per thread and read with a raw
 * system call: no agent interposes on it, and at about 2 us a read it hardly adds time outside
 * the program's marks (fopen, interposed, added 2.5 points of `full_pipe`'s time). */
static inline int schedstat_ns(unsigned long long *on_cpu, unsigned long long *waiting) {
    static __thread int fd = -2;
    if (fd == -2) fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    char text[128];
    long got = fd >= 0 ? syscall(SYS_pread64, fd, text, sizeof text - 1, 0) : -1;
    if (got <= 0) return 0;
    text[got] = 0;
    return sscanf(text, "%llu %llu", on_cpu, waiting) == 2;
}

/* The calling thread's time on a CPU plus its time queued for one (schedstat's first two
 * numbers, complete while the thread runs), in milliseconds; its CPU time alone where schedstat
 * is unreadable. The queued time includes waits for a CPU after wake-ups and preemptions (which
 * fsprof counts as running time), and also time a thread that blocked stayed queued (EEVDF's
 * delayed dequeue), which is blocked time: an upper bound of the former. */
static inline double runnable_ms(void) {
    unsigned long long on_cpu, waiting;
    return schedstat_ns(&on_cpu, &waiting) ? (on_cpu + waiting) / 1e6 : cpu_ms();
}

/* The calling thread's CPU time (up to date) plus its time queued for a CPU (schedstat's second
 * number, complete while the thread runs), in milliseconds: its work as fsprof's shares count
 * it. Unlike the wall clock it leaves out time a hypervisor took from the thread's CPU (steal),
 * which fsprof counts as the thread's running time but shares over its samples: with 30-50%
 * of the CPUs stolen, regions timed by the wall clock had each burst where it fell, 4 to 12
 * points of a 3 ms region's share apart from the report. */
static inline double cpu_and_wait_ms(void) {
    unsigned long long on_cpu, waiting;
    return cpu_ms() + (schedstat_ns(&on_cpu, &waiting) ? waiting / 1e6 : 0);
}

/* Spins (no system call but the clock's, usually the vDSO's) for `us` microseconds. */
static inline void spin_us(unsigned us) {
    double end = now_ms() + us / 1000.0;
    volatile unsigned long x = 1;
    while (now_ms() < end)
        for (int i = 0; i < 64; i++) x = x * 6364136223846793005UL + 1;
}

#endif
