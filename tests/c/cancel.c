/* cancel.c: threads cancelled while blocked in read(2), for the end-to-end test that the agent
 * pops a built-in mark when its call unwinds. For SECONDS it repeats: start a thread that
 * blocks in read() on an empty pipe (input, blocked inside the agent's mark: counted), spin
 * 20 ms on the main thread meanwhile, cancel the thread, whose cleanup handler spins 20 ms (not
 * input: the unwinding through the agent's wrapper must have popped the mark), and join it.
 * It times each part and writes the ground truth as JSON:
 *
 *   cancel SECONDS --truth FILE
 *
 * {"total_ms": T, "features": {"input": {"ms": M, "instances": {}}}}, where T is the time a
 * profiler counts (running threads, and blocked time inside marks): per round, the main thread's
 * until it blocks in the join (creating, spinning, cancelling), and the reader's whole life, from
 * just before its creation to the join's return (its start, its read, its unwinding and cleanup,
 * its exit: on a busy machine its waits for a CPU before its read and after its cleanup took 3.6
 * ms a round, which a truth of the reads and cleanups alone left out). The main thread's join
 * blocks outside any mark. Exits with status 3 if a call fails or the thread was not cancelled
 * inside read. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"

static int pipe_fds[2];

struct round {
    double read_start, read_ms;
    int cancelled;
};

__attribute__((noinline)) static void cleanup_spin(void *arg) {
    struct round *round = arg;
    double t0 = now_ms();
    round->read_ms = t0 - round->read_start;
    round->cancelled = 1;
    spin_us(20000);
}

__attribute__((noinline)) static void *blocked_reader(void *arg) {
    struct round *round = arg;
    char byte;
    pthread_cleanup_push(cleanup_spin, round);
    round->read_start = now_ms();
    if (read(pipe_fds[0], &byte, 1) >= 0) /* nothing is ever written: only cancellation ends it */
        exit(3);
    pthread_cleanup_pop(0);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4 || strcmp(argv[2], "--truth") != 0) {
        fprintf(stderr, "usage: cancel SECONDS --truth FILE\n");
        return 2;
    }
    double run_ms = atof(argv[1]) * 1e3;
    if (pipe(pipe_fds) != 0) return 3;
    double main_ms = 0, input = 0, readers = 0;
    double start = now_ms();
    while (now_ms() - start < run_ms) {
        struct round round = {0};
        pthread_t thread;
        double created = now_ms();
        if (pthread_create(&thread, NULL, blocked_reader, &round) != 0) return 3;
        spin_us(20000);
        if (pthread_cancel(thread) != 0) return 3;
        double joining = now_ms();
        main_ms += joining - created;
        if (pthread_join(thread, NULL) != 0) return 3;
        readers += now_ms() - created;
        if (!round.cancelled) return 3;
        input += round.read_ms;
    }
    FILE *out = fopen(argv[3], "w");
    if (!out) return 3;
    fprintf(out, "{\"total_ms\": %.3f, \"features\": {\"input\": {\"ms\": %.3f, \"instances\": {}}}}\n",
            main_ms + readers, input);
    fclose(out);
    return 0;
}
