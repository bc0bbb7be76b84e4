/* contracts.c: checks at a library boundary marked through the C ABI (fsprof_mark_boundary),
 * for the end-to-end test of the boundary view from C: the Rust target tests/src/bin/contracts.rs
 * in C. For each matrix the `matrix` library checks every element the `client` gives it
 * (`positive?`, client -> matrix) and each index it stores through `vector` (`index?`,
 * matrix -> vector); the client checks each result once (`square?`, client -> matrix). Each
 * piece of work lasts half to one and a half times its mean (a loop of equal steps would keep in
 * step with the sampling grid). It times each check and writes the ground truth as JSON:
 *
 *   contracts SECONDS --truth FILE
 *
 * {"total_ms": T, "features": {"contracts": {"ms": M, "instances": {"positive? (client ->
 * matrix)": P, "index? (matrix -> vector)": I, "square? (client -> matrix)": S}}}} */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"

#include "fsprof.h"

static const fsprof_feature *contracts;
static unsigned long long seed = 13;

static unsigned random_below(unsigned n) {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return (unsigned)(seed % n);
}

/* Spins for half to one and a half times `mean` microseconds. */
static void work(unsigned mean) { spin_us(mean / 2 + random_below(mean + 1)); }

/* One check of about `mean` us on the edge from -> to; returns the time it took. */
static double check(const char *value, const char *from, const char *to, unsigned mean) {
    double t0 = now_ms();
    fsprof_mark_boundary(contracts, value, from, to);
    work(mean);
    fsprof_unmark();
    return now_ms() - t0;
}

int main(int argc, char **argv) {
    if (argc != 4 || strcmp(argv[2], "--truth") != 0) {
        fprintf(stderr, "usage: contracts SECONDS --truth FILE\n");
        return 2;
    }
    contracts = fsprof_feature_new("contracts");
    double positive = 0, index = 0, square = 0;
    double start = now_ms(), end = start + atof(argv[1]) * 1000;
    while (now_ms() < end) {
        for (int element = 0; element < 64; element++) {
            positive += check("positive?", "client", "matrix", 8);
            index += check("index?", "matrix", "vector", 3);
            work(6);
        }
        square += check("square?", "client", "matrix", 20);
        work(100);
    }
    double total = now_ms() - start;
    FILE *f = fopen(argv[3], "w");
    if (!f) {
        perror(argv[3]);
        return 1;
    }
    fprintf(f,
            "{\"total_ms\": %f, \"features\": {\"contracts\": {\"ms\": %f, \"instances\": "
            "{\"positive? (client -> matrix)\": %f, \"index? (matrix -> vector)\": %f, "
            "\"square? (client -> matrix)\": %f}}}}\n",
            total, positive + index + square, positive, index, square);
    fclose(f);
    return 0;
}
