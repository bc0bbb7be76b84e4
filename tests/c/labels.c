/* labels.c: a program with no fsprof shim that publishes custom labels by the custom-labels ABI
 * v1 (polarsignals/custom-labels, as parca-agent reads them): it exports the ABI's version and
 * its thread-local pointer to the current label set, and spends its time under labels
 * `request=GET /a` (with `tenant=acme`), `request=GET /b`, and none, timing each itself by its
 * work (CPU time, scaled for steal, and waits for a CPU: see `main`).
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
#include "on_cpu.h"

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

/* The CPU time the regions took, and their waits for a CPU, apart (see main). */
struct work { double cpu, waiting; };

/* Busy for `ms` milliseconds under `set` (NULL: no labels); adds the work it took to `into`
 * (CPU time and waits for a CPU, steal left out: see `main` for where steal goes). */
static void under(custom_labels_labelset_t *set, double ms, struct work *into) {
    double start = now_ms(), cpu = cpu_ms(), work = cpu_and_wait_ms();
    *(custom_labels_labelset_t *volatile *)&custom_labels_current_set = set;
    unsigned long x = 1;
    while (now_ms() - start < ms) {
        for (int i = 0; i < 1000; i++) x = x * 31 + i;
    }
    sink += x;
    *(custom_labels_labelset_t *volatile *)&custom_labels_current_set = NULL;
    double cpu_took = cpu_ms() - cpu;
    into->cpu += cpu_took;
    into->waiting += cpu_and_wait_ms() - work - cpu_took;
}

int main(int argc, char **argv) {
    if (argc != 4 || strcmp(argv[2], "--truth") != 0) {
        fprintf(stderr, "usage: labels SECONDS --truth FILE\n");
        return 2;
    }
    double seconds = atof(argv[1]);
    struct work a = { 0, 0 }, b = { 0, 0 }, none = { 0, 0 };
    int counter = on_cpu_counter();
    double start = now_ms(), cpu = cpu_ms(), on_cpu = on_cpu_ms(counter);
    while (now_ms() - start < seconds * 1e3) {
        under(&a_set, 3, &a);
        under(&b_set, 1, &b);
        under(NULL, 1, &none);
    }
    /* Time a hypervisor took from the thread's CPU while it ran is on no thread clock; fsprof
     * counts it as running time, shared over the thread's samples: each region's CPU time is
     * scaled by the thread's time on a CPU by the kernel's clock over its CPU time. By the
     * wall clock instead, a burst of steal stayed in the region it fell in: with 30-50% of
     * the CPUs stolen the 3 ms region's share was 4 to 12 points off the report's; by CPU time
     * and waits alone, beside busy loops (much waiting), 5 points. */
    double scale = steal_scale(counter, on_cpu, cpu_ms() - cpu);
    double a_ms = a.cpu * scale + a.waiting, b_ms = b.cpu * scale + b.waiting;
    double none_ms = none.cpu * scale + none.waiting, total = a_ms + b_ms + none_ms;
    FILE *truth = fopen(argv[3], "w");
    if (!truth) return 1;
    fprintf(truth,
            "{\"total_ms\": %.3f, \"features\": {"
            "\"request\": {\"ms\": %.3f, \"instances\": {\"GET /a\": %.3f, \"GET /b\": %.3f}},"
            "\"tenant\": {\"ms\": %.3f, \"instances\": {\"acme\": %.3f}}},"
            " \"extra\": {\"unlabelled_ms\": %.3f}}\n",
            total, a_ms + b_ms, a_ms, b_ms, a_ms, a_ms, none_ms);
    fclose(truth);
    return 0;
}
