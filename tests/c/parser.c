/* parser.c: a parser with ordered choice marked through the C ABI (fsprof_mark_alternative),
 * for the end-to-end test of the backtracking view from C: the Rust target tests/src/bin/parser.rs
 * in C. Tokens of 5 to 10 characters, seven words for every three numbers; `item` tries
 * `number` (branch 0), then `word` (branch 1) at the same offset; a branch costs 400 us per
 * character scanned, the whole token when it matches, half of it when it fails. It times each
 * branch and writes the ground truth as JSON (tests/src/lib.rs's format):
 *
 *   parser SECONDS --truth FILE
 *
 * {"total_ms": T, "features": {"parse": {"ms": M, "instances": {"item, branch 0": A0, ...}}},
 *  "extra": {"all item 0": A0, "wasted item 0": W0, "all item 1": A1, "wasted item 1": W1}} */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"

#include "fsprof.h"

static unsigned long long seed = 11;

static unsigned random_below(unsigned n) {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return (unsigned)(seed % n);
}

int main(int argc, char **argv) {
    if (argc != 4 || strcmp(argv[2], "--truth") != 0) {
        fprintf(stderr, "usage: parser SECONDS --truth FILE\n");
        return 2;
    }
    const fsprof_feature *parse = fsprof_feature_new("parse");
    double all[2] = {0, 0}, wasted[2] = {0, 0};
    double start = now_ms(), end = start + atof(argv[1]) * 1000;
    unsigned long long offset = 0;
    while (now_ms() < end) {
        unsigned length = 5 + random_below(6);
        unsigned kind = random_below(10) < 3 ? 0 : 1; /* 0 a number, 1 a word */
        for (unsigned branch = 0; branch < 2; branch++) {
            int matches = kind == branch;
            double t0 = now_ms();
            fsprof_mark_alternative(parse, "item", branch, offset);
            spin_us(400 * (matches ? length : (length + 1) / 2));
            fsprof_unmark();
            double took = now_ms() - t0;
            all[branch] += took;
            if (!matches)
                wasted[branch] += took;
            if (matches)
                break;
        }
        offset += length;
    }
    double total = now_ms() - start;
    FILE *f = fopen(argv[3], "w");
    if (!f) {
        perror(argv[3]);
        return 1;
    }
    fprintf(f,
            "{\"total_ms\": %f, \"features\": {\"parse\": {\"ms\": %f, \"instances\": "
            "{\"item, branch 0\": %f, \"item, branch 1\": %f}}}, \"extra\": {\"all item 0\": %f, "
            "\"wasted item 0\": %f, \"all item 1\": %f, \"wasted item 1\": %f}}\n",
            total, all[0] + all[1], all[0], all[1], all[0], wasted[0], all[1], wasted[1]);
    fclose(f);
    return 0;
}
