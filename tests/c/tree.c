/* tree.c: nested instances of one feature marked through the C ABI (fsprof.h), for the
 * end-to-end test of the tree analysis from C. One thread marks `server` (instance "server")
 * for its whole run and, inside it, a random mix of: "conn-A" (four times as often as "conn-B"),
 * sometimes with "parse" nested in it, "conn-B", and work of the server's own. It times each
 * piece of work where it runs and writes the ground truth as JSON (tests/src/lib.rs's format):
 *
 *   tree SECONDS --truth FILE
 *
 * {"total_ms": T, "features": {"server": {"ms": M, "instances": {...}}},
 *  "trees": {"server": {"server > conn-A": SELF_MS, ...}}} */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"

#include "fsprof.h"

enum { SERVER, CONN_A, PARSE, CONN_B, PATHS };
static const char *const paths[PATHS] = {"server", "server > conn-A", "server > conn-A > parse",
                                         "server > conn-B"};
static const char *const instances[PATHS] = {"server", "conn-A", "parse", "conn-B"};
static double self_ms[PATHS];
static unsigned long long seed = 7;

static unsigned random_below(unsigned n) {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return (unsigned)(seed % n);
}

/* Spins for 100-900 us and credits the time it took to `path`. */
static void work(int path) {
    double t0 = now_ms();
    spin_us(100 + random_below(801));
    self_ms[path] += now_ms() - t0;
}

int main(int argc, char **argv) {
    if (argc != 4 || strcmp(argv[2], "--truth") != 0) {
        fprintf(stderr, "usage: tree SECONDS --truth FILE\n");
        return 2;
    }
    const fsprof_feature *server = fsprof_feature_new("server");
    double start = now_ms(), end = start + atof(argv[1]) * 1000;
    fsprof_mark(server, "server");
    while (now_ms() < end) {
        unsigned choice = random_below(10);
        if (choice <= 7) {
            fsprof_mark(server, "conn-A");
            work(CONN_A);
            if (choice <= 3) {
                fsprof_mark(server, "parse");
                work(PARSE);
                fsprof_unmark();
                work(CONN_A);
            }
            fsprof_unmark();
        } else if (choice == 8) {
            fsprof_mark(server, "conn-B");
            work(CONN_B);
            fsprof_unmark();
        } else {
            work(SERVER);
        }
    }
    fsprof_unmark();
    double total = now_ms() - start;
    FILE *f = fopen(argv[3], "w");
    if (!f) {
        perror(argv[3]);
        return 1;
    }
    double sum = 0;
    for (int i = 0; i < PATHS; i++) sum += self_ms[i];
    fprintf(f, "{\"total_ms\": %f, \"features\": {\"server\": {\"ms\": %f, \"instances\": {", total, sum);
    for (int i = 0; i < PATHS; i++)
        fprintf(f, "%s\"%s\": %f", i ? ", " : "", instances[i], self_ms[i]);
    fprintf(f, "}}}, \"trees\": {\"server\": {");
    for (int i = 0; i < PATHS; i++)
        fprintf(f, "%s\"%s\": %f", i ? ", " : "", paths[i], self_ms[i]);
    fprintf(f, "}}}\n");
    fclose(f);
    return 0;
}
