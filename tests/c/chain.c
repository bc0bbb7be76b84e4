/* chain.c: a native-stack target in C. The main thread runs the known call chain
 * main -> c_outer -> c_middle (this executable) -> leaf_work (libleaf.so), whose mark "leaf"
 * holds the CPU for about 10 ms per call with no further calls, for SECONDS seconds. Built with
 * `gcc -O2 -g -fomit-frame-pointer`, so unwinding needs DWARF CFI, across a shared library.
 * `noipa` keeps each function a separate, unrenamed frame; each uses its callee's result, so no
 * call is a tail call.
 *
 *   chain SECONDS [--truth FILE] [--ready FILE]
 *
 * The truth (format of tests/src/lib.rs, plus "chains") has the time inside the mark, the total,
 * and the expected chain, outermost first, with the thread id and the module of each function.
 * It does not mark anything outside leaf_work. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

unsigned long leaf_work(unsigned long iterations); /* libleaf.so */

__attribute__((noipa)) unsigned long c_middle(unsigned long iterations) {
    return leaf_work(iterations) * 3 + 1;
}

/* Calls c_middle until `run_ms` have passed; returns the time spent inside it. */
__attribute__((noipa)) double c_outer(double run_ms, unsigned long iterations) {
    double start = now_ms(), inside = 0;
    unsigned long sink = 0;
    while (now_ms() - start < run_ms) {
        double t = now_ms();
        sink += c_middle(iterations);
        inside += now_ms() - t;
    }
    return inside + (double)(sink & 0); /* keep sink alive */
}

static void write_atomically(const char *path, const char *text) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
        perror(path);
        exit(1);
    }
}

int main(int argc, char **argv) {
    const char *truth_path = NULL, *ready_path = NULL;
    if (argc < 2) {
        fprintf(stderr, "usage: chain SECONDS [--truth FILE] [--ready FILE]\n");
        return 1;
    }
    double run_ms = atof(argv[1]) * 1e3;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--truth")) truth_path = argv[i + 1];
        else if (!strcmp(argv[i], "--ready")) ready_path = argv[i + 1];
    }
    /* Calibrate: iterations for about 10 ms per leaf_work call (this call counts, too). */
    double start = now_ms();
    leaf_work(1000000);
    double per_million = now_ms() - start;
    unsigned long iterations = (unsigned long)(1e6 * 10.0 / (per_million > 0.01 ? per_million : 0.01));
    if (ready_path) {
        char pid[32];
        snprintf(pid, sizeof pid, "%d", (int)getpid());
        write_atomically(ready_path, pid);
    }
    double inside = per_million + c_outer(run_ms - per_million, iterations);
    double total = now_ms() - start;
    if (truth_path) {
        char json[4096];
        snprintf(json, sizeof json,
                 "{\"total_ms\": %f, \"extra\": {}, "
                 "\"features\": {\"leaf\": {\"ms\": %f, \"instances\": {\"leaf\": %f}}}, "
                 "\"chains\": [{\"thread\": \"main\", \"tid\": %d, \"feature\": \"leaf\", "
                 "\"instance\": \"leaf\", \"frames\": [\"main\", \"c_outer\", \"c_middle\", \"leaf_work\"], "
                 "\"modules\": [\"chain\", \"chain\", \"chain\", \"libleaf.so\"]}]}\n",
                 total, inside, inside, (int)gettid());
        write_atomically(truth_path, json);
    }
    return 0;
}
