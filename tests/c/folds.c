/* folds.c: a thread without marks that blocks often and briefly (500 sleeps of 100 us), then once
 * for long, 300 ms in a `read` of a timerfd; three times. The kernel folds its short stretches
 * off the CPU (fsprof's `ring::FOLD_MOST_NS`), and the long block's departure comes so soon
 * after a short one that its stack is rarely copied: it must still have its own stack, the
 * `read`'s, not a sleep's. It first runs for the milliseconds its argument says (default 0):
 * without them it is running at a tick after its exec only one time in ten. Prints the time it
 * measured blocked in `read`. Usage: folds [MS] */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    volatile unsigned long spin = 0;
    for (double until = now() + (argc > 1 ? atof(argv[1]) : 0) / 1e3; now() < until;) spin++;
    int timer = timerfd_create(CLOCK_MONOTONIC, 0);
    if (timer < 0) return 1;
    double in_read = 0;
    for (int round = 0; round < 3; round++) {
        struct timespec brief = {0, 100000};
        for (int i = 0; i < 500; i++) nanosleep(&brief, NULL);
        struct itimerspec once = {{0, 0}, {0, 300000000}};
        if (timerfd_settime(timer, 0, &once, NULL)) return 1;
        double start = now();
        uint64_t expired;
        if (read(timer, &expired, sizeof expired) != sizeof expired) return 1;
        in_read += now() - start;
    }
    printf("in read %.1f ms\n", in_read * 1e3);
    return 0;
}
