/* functions.c: a program without marks whose functions have known self times, for the function
 * view. main calls outer (200 us of its own work, then inner: 300 us), lone (500 us) and rec,
 * which recurses five deep and works 100 us at the bottom. Each function's own work is a loop
 * of arithmetic calibrated at start (no clock call inside it, so no time lands in the vDSO);
 * its time is taken at its edges. Writes the truth as JSON to argv[2]:
 * {"total_ms": T, "self_ms": {"outer": ..., "inner": ..., "lone": ..., "rec": ...}}.
 * Usage: functions SECONDS TRUTH_FILE */
#include "clock.h"
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

static double per_us; /* loop iterations per microsecond */
static double self_ms[4];
static volatile unsigned long sink;

#define WORK(us)                                                           \
    do {                                                                   \
        unsigned long x = sink, n = (unsigned long)((us) * per_us);        \
        for (unsigned long i = 0; i < n; i++)                              \
            x = x * 6364136223846793005UL + 1442695040888963407UL;         \
        sink = x;                                                          \
    } while (0)

__attribute__((noinline, noclone)) void inner(void) {
    double t = now_ms();
    WORK(300);
    self_ms[1] += now_ms() - t;
}

__attribute__((noinline, noclone)) void outer(void) {
    double t = now_ms();
    WORK(200);
    self_ms[0] += now_ms() - t;
    inner();
    sink += 1;
}

__attribute__((noinline, noclone)) void lone(void) {
    double t = now_ms();
    WORK(500);
    self_ms[2] += now_ms() - t;
}

__attribute__((noinline, noclone)) int rec(int depth) {
    if (depth == 0) {
        double t = now_ms();
        WORK(100);
        self_ms[3] += now_ms() - t;
        return 0;
    }
    int below = rec(depth - 1);
    sink += (unsigned long)below;
    return below + 1;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: functions SECONDS TRUTH_FILE\n");
        return 2;
    }
    /* Asleep first (not counted by either), so that the profiler's first sample, later when it
     * starts cold, comes before anything counts; from then on all counts, calibration included. */
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0); /* `fsprof attach` from a sibling */
    usleep(300000);
    double begin = now_ms();
    double seconds = atof(argv[1]);
    per_us = 1.0;
    double t = now_ms();
    WORK(20000000.0); /* 20 M iterations */
    per_us = 20000000.0 / ((now_ms() - t) * 1000.0);
    double start = now_ms();
    while (now_ms() - start < seconds * 1000.0) {
        outer();
        lone();
        rec(5);
    }
    double total = now_ms() - begin;
    FILE *out = fopen(argv[2], "w");
    if (!out)
        return 1;
    fprintf(out,
            "{\"total_ms\": %f, \"self_ms\": {\"outer\": %f, \"inner\": %f, \"lone\": %f, "
            "\"rec\": %f}}\n",
            total, self_ms[0], self_ms[1], self_ms[2], self_ms[3]);
    fclose(out);
    return 0;
}
