/* strdups.c: a loop of strdup and free, so malloc is called from inside libc tens of millions of
 * times a second: nearly all of the program's time is allocation, and with the agent preloaded
 * a good part of it is the agent's own code around each call.
 *
 *   strdups SECONDS --truth FILE
 *
 * Writes {"total_ms": T, "extra": {"calls": N}, "features": {}}: T is the loop's wall time, N
 * the malloc and free calls it made. */
#include "clock.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 4 || strcmp(argv[2], "--truth") != 0) {
        fprintf(stderr, "usage: strdups SECONDS --truth FILE\n");
        return 2;
    }
    double start = now_ms(), end = start + atof(argv[1]) * 1000.0;
    long calls = 0;
    size_t total = 0;
    while (now_ms() < end) {
        for (int i = 0; i < 10000; i++) {
            char *copy = strdup("a string of some length");
            total += strlen(copy);
            free(copy);
        }
        calls += 20000;
    }
    FILE *truth = fopen(argv[3], "w");
    if (!truth) {
        perror(argv[3]);
        return 1;
    }
    fprintf(truth, "{\"total_ms\": %.3f, \"extra\": {\"calls\": %ld, \"bytes\": %zu}, \"features\": {}}\n",
            now_ms() - start, calls, total);
    fclose(truth);
    return 0;
}
