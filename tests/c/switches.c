/* switches.c: two threads that hand a byte back and forth through two pipes, so that each
 * blocks and is woken at every hand-over: a program that leaves its CPU hundreds of thousands of
 * times a second, for tests/benches/switch-cost.sh. Prints the wall time per hand-over and the
 * context switches of its two threads per second (each counts its own with
 * getrusage(RUSAGE_THREAD)). Built with -DMARKED (and fsprof.h, linked with the agent), each
 * thread hands over inside a mark of its own. Usage: switches SECONDS */
#define _GNU_SOURCE
#ifdef MARKED
#include "fsprof.h"
#define MARK(name) fsprof_mark(fsprof_feature_new("hand-over"), name)
#define UNMARK() fsprof_unmark()
#else
#define MARK(name)
#define UNMARK()
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static int there[2], back[2];
static volatile int stop;
static long switches[2];

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static long own_switches(void) {
    struct rusage usage;
    getrusage(RUSAGE_THREAD, &usage);
    return usage.ru_nvcsw + usage.ru_nivcsw;
}

static void *echo(void *unused) {
    (void)unused;
    char byte;
    long before = own_switches();
    MARK("echo");
    while (read(there[0], &byte, 1) == 1 && byte) {
        if (write(back[1], &byte, 1) != 1) break;
    }
    UNMARK();
    switches[1] = own_switches() - before;
    return NULL;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 2;
    if (pipe(there) || pipe(back)) return 1;
    pthread_t thread;
    pthread_create(&thread, NULL, echo, NULL);
    long before = own_switches(), rounds = 0;
    double start = now(), end = start + seconds;
    char byte = 1;
    MARK("send");
    while (now() < end) {
        for (int i = 0; i < 1000; i++) {
            if (write(there[1], &byte, 1) != 1 || read(back[0], &byte, 1) != 1) return 1;
        }
        rounds += 1000;
    }
    UNMARK();
    double elapsed = now() - start;
    switches[0] = own_switches() - before;
    byte = 0;
    if (write(there[1], &byte, 1) != 1) return 1;
    pthread_join(thread, NULL);
    printf("%.1f ns per hand-over, %.0f switches per second\n", elapsed * 1e9 / rounds,
           (switches[0] + switches[1]) / elapsed);
    return 0;
}
