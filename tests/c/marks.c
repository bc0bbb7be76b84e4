/* marks.c: a C program with known behaviour that marks through the C ABI (fsprof.h), for the
 * end-to-end test of libfsprof_agent.so. Two pthreads run a random mix of nested features,
 * antimarks (with another feature marked inside), call-site marks (NULL payload), unmarked work
 * and unbalanced unmarks on an empty stack; each times its own marked regions, and the program
 * writes that ground truth as JSON in the format of tests/src/lib.rs (`Truth::to_json`).
 *
 *   marks SECONDS [--truth FILE] [--ready FILE]
 *
 * The call-site instance cannot know its own address: its truth key is "<call site>", and the test
 * maps the reported `0x…` payload to it. It also checks the ABI's promises it can see from inside
 * (interning, NULL handling) and exits with status 2 if one is broken. It does not check where
 * marks are placed among native frames (see chain.c). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

#include "fsprof.h"

enum { STMT, EXPR, IDENT, CALLBACK, SITE, EXTRA, N_INSTANCES };

struct thread_truth {
    unsigned long seed;
    double ms[N_INSTANCES];
    double active_ms;
};

static const fsprof_feature *parsing, *lexing, *output;
static double run_ms;

static unsigned long next(unsigned long *state) {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

static unsigned micros(unsigned long *rng, unsigned lo, unsigned hi) {
    return lo + next(rng) % (hi - lo + 1);
}

static void *worker(void *arg) {
    struct thread_truth *truth = arg;
    unsigned long *rng = &truth->seed;
    fsprof_unmark(); /* unbalanced, on an empty stack: nothing happens */
    double start = now_ms();
    while (now_ms() - start < run_ms) {
        double t0, t1, t2, t3;
        switch (next(rng) % 5) {
        case 0: /* parsing/stmt around lexing/ident: both count the inner time */
            fsprof_mark(parsing, "stmt");
            t0 = now_ms();
            spin_us(micros(rng, 100, 1000));
            fsprof_mark(lexing, "ident");
            t1 = now_ms();
            spin_us(micros(rng, 100, 1000));
            t2 = now_ms();
            fsprof_unmark();
            spin_us(micros(rng, 100, 1000));
            t3 = now_ms();
            fsprof_unmark();
            truth->ms[STMT] += t3 - t0;
            truth->ms[IDENT] += t2 - t1;
            break;
        case 1: /* parsing/expr with an antimark; lexing marked under it still counts */
            fsprof_mark(parsing, "expr");
            t0 = now_ms();
            spin_us(micros(rng, 100, 1000));
            t1 = now_ms();
            fsprof_antimark(parsing);
            fsprof_mark(lexing, "callback");
            t2 = now_ms();
            spin_us(micros(rng, 100, 1000));
            truth->ms[CALLBACK] += now_ms() - t2;
            fsprof_unmark();
            fsprof_unmark();
            t2 = now_ms();
            spin_us(micros(rng, 100, 1000));
            t3 = now_ms();
            fsprof_unmark();
            truth->ms[EXPR] += (t1 - t0) + (t3 - t2);
            break;
        case 2: /* the instance is this call site */
            fsprof_mark(output, NULL);
            t0 = now_ms();
            spin_us(micros(rng, 200, 2000));
            truth->ms[SITE] += now_ms() - t0;
            fsprof_unmark();
            break;
        case 3:
            spin_us(micros(rng, 200, 2000));
            break;
        default: /* one unmark too many: the second finds the stack empty */
            fsprof_mark(output, "extra-unmark");
            t0 = now_ms();
            spin_us(micros(rng, 100, 1000));
            truth->ms[EXTRA] += now_ms() - t0;
            fsprof_unmark();
            fsprof_unmark();
            break;
        }
    }
    truth->active_ms = now_ms() - start;
    return NULL;
}

static int check_abi(void) {
    if (fsprof_feature_new("parsing") != parsing) return 0; /* interned */
    if (fsprof_feature_new("lexing") == parsing) return 0;
    if (fsprof_feature_new(NULL) != NULL) return 0;
    if (fsprof_feature_new("\xff\xfe not utf-8") == NULL) return 0;
    fsprof_mark(NULL, "ignored"); /* NULL features record nothing */
    fsprof_antimark(NULL);
    fsprof_unmark();
    fsprof_unmark();
    return 1;
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
        fprintf(stderr, "usage: marks SECONDS [--truth FILE] [--ready FILE]\n");
        return 1;
    }
    run_ms = atof(argv[1]) * 1e3;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--truth")) truth_path = argv[i + 1];
        else if (!strcmp(argv[i], "--ready")) ready_path = argv[i + 1];
    }
    parsing = fsprof_feature_new("parsing");
    lexing = fsprof_feature_new("lexing");
    output = fsprof_feature_new("output");
    if (!check_abi()) {
        fprintf(stderr, "marks: the C ABI broke a promise\n");
        return 2;
    }
    struct thread_truth truths[2] = {{.seed = 21}, {.seed = 22}};
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) pthread_create(&threads[i], NULL, worker, &truths[i]);
    if (ready_path) {
        char pid[32];
        snprintf(pid, sizeof pid, "%d", (int)getpid());
        write_atomically(ready_path, pid);
    }
    double ms[N_INSTANCES] = {0}, total = 0;
    for (int i = 0; i < 2; i++) {
        pthread_join(threads[i], NULL);
        for (int k = 0; k < N_INSTANCES; k++) ms[k] += truths[i].ms[k];
        total += truths[i].active_ms;
    }
    if (truth_path) {
        char json[4096];
        snprintf(json, sizeof json,
                 "{\"total_ms\": %f, \"extra\": {}, \"features\": {"
                 "\"parsing\": {\"ms\": %f, \"instances\": {\"stmt\": %f, \"expr\": %f}}, "
                 "\"lexing\": {\"ms\": %f, \"instances\": {\"ident\": %f, \"callback\": %f}}, "
                 "\"output\": {\"ms\": %f, \"instances\": {\"<call site>\": %f, \"extra-unmark\": %f}}}}\n",
                 total, ms[STMT] + ms[EXPR], ms[STMT], ms[EXPR], ms[IDENT] + ms[CALLBACK], ms[IDENT],
                 ms[CALLBACK], ms[SITE] + ms[EXTRA], ms[SITE], ms[EXTRA]);
        write_atomically(truth_path, json);
    }
    return 0;
}
