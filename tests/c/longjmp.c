/* longjmp.c: a thread that leaves blocked read(2) calls by siglongjmp from a signal handler, for
 * the end-to-end test that the agent's `input` mark, never popped, stops counting. For SECONDS
 * it repeats: arm a 10 ms one-shot timer, block in read() on an empty pipe until SIGALRM's
 * handler jumps out (input, blocked inside the agent's mark), then free(malloc()) (the thread's
 * next interposed call, which finds the mark stale and drops it), then spin 10 ms (not input).
 * It times the reads and writes the ground truth as JSON:
 *
 *   longjmp SECONDS --truth FILE
 *
 * {"total_ms": T, "features": {"input": {"ms": M, "instances": {}}}}. One thread, never
 * blocked outside read, so the total is the loop's wall time. Exits with status 3 if a call
 * fails. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "clock.h"

static sigjmp_buf out_of_read;

static void on_alarm(int sig) {
    (void)sig;
    siglongjmp(out_of_read, 1);
}

int main(int argc, char **argv) {
    if (argc != 4 || strcmp(argv[2], "--truth") != 0) {
        fprintf(stderr, "usage: longjmp SECONDS --truth FILE\n");
        return 2;
    }
    double run_ms = atof(argv[1]) * 1e3;
    int fds[2];
    if (pipe(fds) != 0) return 3;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_alarm;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGALRM, &action, NULL) != 0) return 3;
    struct itimerval once = {{0, 0}, {0, 10000}};
    double input = 0;
    double start = now_ms();
    while (now_ms() - start < run_ms) {
        volatile double t0 = now_ms();
        if (sigsetjmp(out_of_read, 1) == 0) {
            char byte;
            if (setitimer(ITIMER_REAL, &once, NULL) != 0) return 3;
            if (read(fds[0], &byte, 1) >= 0) return 3; /* nothing is ever written */
            return 3;
        }
        input += now_ms() - t0;
        free(malloc(64));
        spin_us(10000);
    }
    double total = now_ms() - start;
    FILE *out = fopen(argv[3], "w");
    if (!out) return 3;
    fprintf(out, "{\"total_ms\": %.3f, \"features\": {\"input\": {\"ms\": %.3f, \"instances\": {}}}}\n",
            total, input);
    fclose(out);
    return 0;
}
