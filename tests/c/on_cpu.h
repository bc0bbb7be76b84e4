/* on_cpu.h: a thread's time on a CPU by the kernel's clock, steal included, for the truths of
 * targets whose regions are timed by CPU time (which leaves out the time a hypervisor took
 * from the thread's CPU while it ran: fsprof counts that as running time, shared over the
 * thread's samples). Not in clock.h: that is built with musl too, whose headers lack Linux's. */
#ifndef FSPROF_TESTS_ON_CPU_H
#define FSPROF_TESTS_ON_CPU_H

#include <linux/perf_event.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* A task-clock counter on the calling thread (-1 if the kernel refuses one). */
static inline int on_cpu_counter(void) {
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_TASK_CLOCK;
    attr.exclude_hv = 1;
    return (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

/* The thread's time on a CPU so far by `counter` (from `on_cpu_counter`), in milliseconds;
 * -1 without one. */
static inline double on_cpu_ms(int counter) {
    unsigned long long ns;
    return counter >= 0 && read(counter, &ns, sizeof ns) == sizeof ns ? ns / 1e6 : -1;
}

/* What the thread's CPU time `ran` (ms) since `on_cpu` (an `on_cpu_ms` then) stands for in
 * time on a CPU: their ratio, at least 1 (1 without a counter). */
static inline double steal_scale(int counter, double on_cpu, double ran) {
    double counted = on_cpu_ms(counter) - on_cpu;
    return on_cpu >= 0 && ran > 0 && counted > ran ? counted / ran : 1;
}

#endif
