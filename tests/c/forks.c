/* forks.c: a program whose memory map is locked for writing for long stretches, for the
 * end-to-end test that fsprof never waits for that lock while sampling. It touches 64 MiB, so
 * that each fork() copies a large address space (a millisecond or more, with the map locked),
 * then for SECONDS repeats: fork a child that spins 300 µs and exits, waitpid for it, spin
 * 1500 µs. No marks of its own: the agent marks fork and waitpid under `process`, each at its call
 * site (do_fork, do_wait). It times each call and writes the ground truth as JSON:
 *
 *   forks SECONDS --truth FILE
 *
 * {"total_ms": T, "features": {"process": {"ms": M, "instances": {"do_fork": F, "do_wait": W}}}}.
 * One thread, never blocked outside those calls, so the total is its wall time from the start
 * of main (setting up the 64 MiB included). Exits
 * with status 3 if a call fails or a child does not exit with status 0. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

__attribute__((noinline)) static pid_t do_fork(double *ms) {
    double t0 = now_ms();
    pid_t pid = fork();
    if (pid == 0) {
        spin_us(300);
        _exit(0);
    }
    *ms += now_ms() - t0;
    if (pid < 0) exit(3);
    return pid;
}

__attribute__((noinline)) static void do_wait(pid_t pid, double *ms) {
    int status;
    double t0 = now_ms();
    pid_t got = waitpid(pid, &status, 0);
    *ms += now_ms() - t0;
    if (got != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) exit(3);
}

int main(int argc, char **argv) {
    if (argc != 4 || strcmp(argv[2], "--truth") != 0) {
        fprintf(stderr, "usage: forks SECONDS --truth FILE\n");
        return 2;
    }
    double run_ms = atof(argv[1]) * 1e3;
    /* The total starts before the 64 MiB are touched: that takes tens of milliseconds of page
     * faults, outside any mark, which the profile counts too. */
    double start = now_ms();
    size_t size = 64 << 20;
    char *big = malloc(size);
    if (!big) return 3;
    for (size_t i = 0; i < size; i += 4096) big[i] = 1;
    double forking = 0, waiting = 0;
    while (now_ms() - start < run_ms) {
        do_wait(do_fork(&forking), &waiting);
        spin_us(1500);
    }
    double total = now_ms() - start;
    FILE *out = fopen(argv[3], "w");
    if (!out) return 3;
    fprintf(out,
            "{\"total_ms\": %.3f, \"features\": {\"process\": {\"ms\": %.3f, \"instances\": "
            "{\"do_fork\": %.3f, \"do_wait\": %.3f}}}}\n",
            total, forking + waiting, forking, waiting);
    fclose(out);
    return 0;
}
