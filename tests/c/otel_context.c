/* otel_context.c: a program with no fsprof shim that publishes an OpenTelemetry thread context
 * by its specification (OTEP 4947, as the OpenTelemetry eBPF profiler reads it): it exports
 * the thread-local `otel_thread_ctx_v1`, a pointer to the thread's current record (trace and
 * span ids, `valid`, flags, then attributes `{key index, length, bytes}`), and publishes the
 * process context (OTEP 4719: a memfd named OTEL_CTX whose header points to a protobuf
 * ProcessContext) that names the keys: `threadlocal.attribute_key_map` = ["http.route",
 * "tenant"]. It spends its time under `http.route=GET /a` (with `tenant=acme`), `http.route=GET
 * /b`, and none (a null pointer, or a record whose `valid` is 0: its attributes do not count),
 * timing each itself by its work (CPU time, scaled for steal, and waits for a CPU: as
 * `labels.c`).
 * Built with -rdynamic (the thread-local exported in the dynamic symbol table).
 *
 *   otel_context SECONDS --truth FILE
 *
 * The truth: total_ms, and per feature (key) per instance (value) its time. */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "on_cpu.h"

/* The thread-local record (OTEP 4947): packed, 2-aligned, at most 640 bytes. */
struct otel_record {
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t valid;
    uint8_t trace_flags;
    uint16_t attrs_data_size;
    uint8_t attrs_data[612];
};

__attribute__((visibility("default"))) __thread struct otel_record *otel_thread_ctx_v1;

static struct otel_record a_rec, b_rec, invalid_rec;

/* Appends attribute {key, value} to `record`. */
static void attribute(struct otel_record *record, uint8_t key, const char *value) {
    size_t len = strlen(value), at = record->attrs_data_size;
    record->attrs_data[at] = key;
    record->attrs_data[at + 1] = (uint8_t)len;
    memcpy(record->attrs_data + at + 2, value, len);
    record->attrs_data_size = (uint16_t)(at + 2 + len);
}

static void ids(struct otel_record *record, uint8_t seed) {
    for (int i = 0; i < 16; i++) record->trace_id[i] = (uint8_t)(seed + i);
    for (int i = 0; i < 8; i++) record->span_id[i] = (uint8_t)(seed * 3 + i);
    record->trace_flags = 1;
}

/* Protobuf: field `field` (length-delimited) holding `len` bytes of `data`, at `out`. */
static size_t bytes_field(uint8_t *out, int field, const void *data, size_t len) {
    size_t at = 0;
    out[at++] = (uint8_t)(field << 3 | 2);
    size_t n = len;
    while (n >= 0x80) { out[at++] = (uint8_t)(n | 0x80); n >>= 7; }
    out[at++] = (uint8_t)n;
    memcpy(out + at, data, len);
    return at + len;
}

/* An AnyValue holding a string. */
static size_t any_string(uint8_t *out, const char *text) {
    return bytes_field(out, 1, text, strlen(text));
}

/* A KeyValue `{key, value}` as field `field` of its message. */
static size_t key_value(uint8_t *out, int field, const char *key, const uint8_t *value, size_t len) {
    uint8_t inner[512];
    size_t at = bytes_field(inner, 1, key, strlen(key));
    at += bytes_field(inner + at, 2, value, len);
    return bytes_field(out, field, inner, at);
}

static uint8_t payload[1024];

/* The process context (OTEP 4719), published as its reference writer does: a memfd mapping
 * named OTEL_CTX, its header's time written last (0 while it is written). */
static void publish_process_context(void) {
    uint8_t any[256], array[256], values[256];
    size_t at = 0, n;
    /* resource { attributes { service.name = "otel_context" } } */
    n = any_string(any, "otel_context");
    uint8_t resource[256];
    size_t r = key_value(resource, 1, "service.name", any, n);
    at += bytes_field(payload + at, 1, resource, r);
    /* attributes: the schema, the key map (an array of strings: index i names key i) */
    n = any_string(any, "tlsdesc_v1_dev");
    at += key_value(payload + at, 2, "threadlocal.schema_version", any, n);
    size_t v = 0;
    v += bytes_field(values + v, 1, any, any_string(any, "http.route"));
    v += bytes_field(values + v, 1, any, any_string(any, "tenant"));
    n = bytes_field(array, 5, values, v);
    at += key_value(payload + at, 2, "threadlocal.attribute_key_map", array, n);

    int fd = memfd_create("OTEL_CTX", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, 4096) != 0) { perror("memfd_create"); exit(1); }
    uint8_t *header = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (header == MAP_FAILED) { perror("mmap"); exit(1); }
    close(fd);
    madvise(header, 4096, MADV_DONTFORK);
    uint32_t version = 2, size = (uint32_t)at;
    uint64_t zero = 0, pointer = (uint64_t)(uintptr_t)payload;
    memcpy(header, "OTEL_CTX", 8);
    memcpy(header + 8, &version, 4);
    memcpy(header + 12, &size, 4);
    memcpy(header + 16, &zero, 8);
    memcpy(header + 24, &pointer, 8);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    uint64_t published = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    memcpy(header + 16, &published, 8);
    prctl(0x53564d41 /* PR_SET_VMA */, 0 /* PR_SET_VMA_ANON_NAME */, header, 4096, "OTEL_CTX");
}

static volatile unsigned long sink;

/* The CPU time the regions took, and their waits for a CPU, apart (see labels.c's main). */
struct work { double cpu, waiting; };

/* Busy for `ms` milliseconds with `record` current (NULL: none); adds the work it took to
 * `into`. The pointer is swapped, as the specification's first style of writer does. */
static void under(struct otel_record *record, double ms, struct work *into) {
    double start = now_ms(), cpu = cpu_ms(), work = cpu_and_wait_ms();
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    *(struct otel_record *volatile *)&otel_thread_ctx_v1 = record;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    unsigned long x = 1;
    while (now_ms() - start < ms) {
        for (int i = 0; i < 1000; i++) x = x * 31 + i;
    }
    sink += x;
    *(struct otel_record *volatile *)&otel_thread_ctx_v1 = NULL;
    double cpu_took = cpu_ms() - cpu;
    into->cpu += cpu_took;
    into->waiting += cpu_and_wait_ms() - work - cpu_took;
}

int main(int argc, char **argv) {
    if (argc != 4 || strcmp(argv[2], "--truth") != 0) {
        fprintf(stderr, "usage: otel_context SECONDS --truth FILE\n");
        return 2;
    }
    double seconds = atof(argv[1]);
    publish_process_context();
    ids(&a_rec, 1);
    attribute(&a_rec, 0, "GET /a");
    attribute(&a_rec, 1, "acme");
    a_rec.valid = 1;
    ids(&b_rec, 2);
    attribute(&b_rec, 0, "GET /b");
    b_rec.valid = 1;
    /* A record being rewritten: not valid, so none of its attributes count. */
    ids(&invalid_rec, 3);
    attribute(&invalid_rec, 0, "GET /z");
    invalid_rec.valid = 0;

    struct work a = { 0, 0 }, b = { 0, 0 }, none = { 0, 0 };
    int counter = on_cpu_counter();
    double start = now_ms(), cpu = cpu_ms(), on_cpu = on_cpu_ms(counter);
    for (unsigned long round = 0; now_ms() - start < seconds * 1e3; round++) {
        under(&a_rec, 3, &a);
        under(&b_rec, 1, &b);
        under(round % 2 ? &invalid_rec : NULL, 1, &none);
    }
    double scale = steal_scale(counter, on_cpu, cpu_ms() - cpu);
    double a_ms = a.cpu * scale + a.waiting, b_ms = b.cpu * scale + b.waiting;
    double none_ms = none.cpu * scale + none.waiting, total = a_ms + b_ms + none_ms;
    FILE *truth = fopen(argv[3], "w");
    if (!truth) return 1;
    fprintf(truth,
            "{\"total_ms\": %.3f, \"features\": {"
            "\"http.route\": {\"ms\": %.3f, \"instances\": {\"GET /a\": %.3f, \"GET /b\": %.3f}},"
            "\"tenant\": {\"ms\": %.3f, \"instances\": {\"acme\": %.3f}}},"
            " \"extra\": {\"unlabelled_ms\": %.3f}}\n",
            total, a_ms + b_ms, a_ms, b_ms, a_ms, a_ms, none_ms);
    fclose(truth);
    return 0;
}
