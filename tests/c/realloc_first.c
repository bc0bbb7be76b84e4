/* realloc_first.c: the process's first reallocarray and realloc, of filled heap blocks (the
 * dynamic loader itself may have called realloc before, not reallocarray), made while another thread
 * makes its first call of an interposed function (fdatasync) and a third thread is inside dlopen,
 * holding the dynamic loader's lock: an agent that looks real functions up on first use (dlsym,
 * which waits for that lock) keeps the second thread resolving for as long as the dlopen lasts.
 * Checks that realloc kept the data and did not fail.
 *
 *   realloc_first PLUGIN
 *
 * PLUGIN: the path of libdlopen_plugin.so (whose constructor waits for registry_lock). Prints
 * "kept" and exits 0, or prints what went wrong and exits 1 (3 if a call fails). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
atomic_int plugin_waiting;

static const char *plugin;
static atomic_int caller_tid, caller_go, caller_done;

static void *loader(void *arg) {
    (void)arg;
    if (!dlopen(plugin, RTLD_NOW)) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        exit(3);
    }
    return NULL;
}

/* A system call made directly, not through libc (whose wrappers the agent interposes: an agent
 * that resolved them on first use would wait for the loader's lock here too). */
static long raw_syscall3(long number, long a, long b, long c) {
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(number), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
    return ret;
}

static void *first_call(void *arg) {
    (void)arg;
    atomic_store(&caller_tid, (int)raw_syscall3(SYS_gettid, 0, 0, 0));
    while (!atomic_load(&caller_go))
        ;
    fdatasync(-1);
    atomic_store(&caller_done, 1);
    return NULL;
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Whether thread `tid` of this process is asleep (state S: waiting for a lock). */
static int asleep(int tid) {
    char path[64], text[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
    long fd = raw_syscall3(SYS_open, (long)path, 0, 0);
    if (fd < 0) return 0;
    long n = raw_syscall3(SYS_read, fd, (long)text, sizeof text - 1);
    raw_syscall3(SYS_close, fd, 0, 0);
    if (n <= 0) return 0;
    text[n] = 0;
    char *close = strrchr(text, ')');
    return close && close[1] == ' ' && close[2] == 'S';
}

static int check(char *p, size_t n, char c, const char *what) {
    if (!p) {
        printf("realloc of %s returned NULL\n", what);
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        if (p[i] != c) {
            printf("realloc of %s lost its data (byte %zu)\n", what, i);
            return 1;
        }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: realloc_first PLUGIN\n");
        return 2;
    }
    plugin = argv[1];
    char *small = malloc(4000);
    char *large = malloc(70000);
    if (!small || !large) return 3;
    memset(small, 'x', 4000);
    memset(large, 'y', 70000);
    pthread_t load, call;
    /* The caller thread starts (and the agent claims its slot) before the loader's lock is taken. */
    if (pthread_create(&call, NULL, first_call, NULL) != 0) return 3;
    while (!atomic_load(&caller_tid))
        ;
    pthread_mutex_lock(&registry_lock);
    if (pthread_create(&load, NULL, loader, NULL) != 0) return 3;
    double deadline = seconds() + 5;
    while (!atomic_load(&plugin_waiting))
        if (seconds() > deadline) return 3;
    /* The loader thread holds the loader's lock until we unlock registry_lock. */
    atomic_store(&caller_go, 1);
    while (!atomic_load(&caller_done) && !(atomic_load(&caller_tid) && asleep(caller_tid)))
        if (seconds() > deadline) return 3;
    char *grown = reallocarray(small, 1000, 100);
    char *moved = realloc(large, 200000);
    pthread_mutex_unlock(&registry_lock);
    pthread_join(load, NULL);
    pthread_join(call, NULL);
    if (check(grown, 4000, 'x', "a 4000-byte block") | check(moved, 70000, 'y', "a 70000-byte block"))
        return 1;
    puts("kept");
    return 0;
}
