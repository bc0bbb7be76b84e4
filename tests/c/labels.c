/* labels.c: a program with no fsprof shim that publishes custom labels by the custom-labels ABI
 * v1 (polarsignals/custom-labels, as parca-agent reads them): it exports the ABI's version and
 * its thread-local pointer to the current label set, and spends its time under labels
 * `request=GET /a` (with `tenant=acme`), `request=GET /b`, and none, timing each itself.
 * Built with -rdynamic (the ABI's symbols exported, as the library's dynamic list does).
 *
 *   labels SECONDS --truth FILE
 *
 * The truth: total_ms, and per feature (label key) per instance (value) its time:
 * features.request.instances."GET /a" and "GET /b", features.tenant.instances.acme. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"

typedef struct { size_t len; const unsigned char *buf; } custom_labels_string_t;
typedef struct { custom_labels_string_t key, value; } custom_labels_label_t;
typedef struct { custom_labels_label_t *storage; size_t count; size_t capacity; } custom_labels_labelset_t;

__attribute__((used, visibility("default"))) uint32_t custom_labels_abi_version = 1;
__attribute__((visibility("default"))) __thread custom_labels_labelset_t *custom_labels_current_set;

#define S(text) { sizeof(text) - 1, (const unsigned char *)(text) }
static custom_labels_label_t a_labels[] = { { S("request"), S("GET /a") }, { S("tenant"), S("acme") } };
static custom_labels_labelset_t a_set = { a_labels, 2, 2 };
static custom_labels_label_t b_labels[] = { { S("request"), S("GET /b") } };
static custom_labels_labelset_t b_set = { b_labels, 1, 1 };

static volatile unsigned long sink;

/* Busy for `ms` milliseconds under `set` (NULL: no labels); returns the time it took. */
static double under(custom_labels_labelset_t *set, double ms) {
    double start = now_ms();
    *(custom_labels_labelset_t *volatile *)&custom_labels_current_set = set;
    unsigned long x = 1;
    while (now_ms() - start < ms) {
        for (int i = 0; i < 1000; i++) x = x * 31 + i;
    }
    sink += x;
    *(custom_labels_labelset_t *volatile *)&custom_labels_current_set = NULL;
    return now_ms() - start;
}

int main(int argc, char **argv) {
    if (argc != 4 || strcmp(argv[2], "--truth") != 0) {
        fprintf(stderr, "usage: labels SECONDS --truth FILE\n");
        return 2;
    }
    double seconds = atof(argv[1]), a = 0, b = 0, none = 0;
    double start = now_ms();
    while (now_ms() - start < seconds * 1e3) {
        a += under(&a_set, 3);
        b += under(&b_set, 1);
        none += under(NULL, 1);
    }
    double total = now_ms() - start;
    FILE *truth = fopen(argv[3], "w");
    if (!truth) return 1;
    fprintf(truth,
            "{\"total_ms\": %.3f, \"features\": {"
            "\"request\": {\"ms\": %.3f, \"instances\": {\"GET /a\": %.3f, \"GET /b\": %.3f}},"
            "\"tenant\": {\"ms\": %.3f, \"instances\": {\"acme\": %.3f}}},"
            " \"extra\": {\"unlabelled_ms\": %.3f}}\n",
            total, a + b, a, b, a, a, none);
    fclose(truth);
    return 0;
}
