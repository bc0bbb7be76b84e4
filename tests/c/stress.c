/* stress.c: WORKERS threads at once, for SECONDS: each forks (a child that allocates, writes and
 * exits 0), dlopens and dlcloses a plugin, reallocs a block it fills and checks, writes to
 * /dev/null while the main thread's SIGUSR1 makes the handler siglongjmp out of the interposed
 * write it interrupted, and does marked work: slices of 100 to 300 us of `work` (instance `slice`),
 * timed, between unmarked ones.
 *
 *   stress WORKERS SECONDS PLUGIN --truth FILE
 *
 * Ground truth, as JSON: {"total_ms": T, "features": {"work": {"ms": M, "instances":
 * {"slice": M}}}, "jumps": J, "forks": F, "dlopens": D}; T is the workers' time plus the
 * signalling main thread's (every thread here runs, or sleeps inside an interposed call). Exits 1
 * if a child did not exit 0, a plugin misbehaved or a realloc lost data; 3 if a call failed. */
#define _GNU_SOURCE
#include "fsprof.h"
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

#define MAX_WORKERS 16

static double run_ms;
static const char *plugin;
static const fsprof_feature *work;
static atomic_int failed, running;
static atomic_long jumps, forks, dlopens;

static __thread sigjmp_buf env;
static __thread volatile sig_atomic_t armed;

static void on_usr1(int sig) {
    (void)sig;
    if (armed) siglongjmp(env, 1);
}

struct worker {
    pthread_t thread;
    int index;
    double marked, total;
};

static void fail(const char *what) {
    fprintf(stderr, "stress: %s\n", what);
    atomic_store(&failed, 1);
}

static void fork_child(void) {
    pid_t pid = fork();
    if (pid < 0) return fail("fork failed");
    if (pid == 0) {
        char *p = malloc(4096);
        if (!p) _exit(3);
        memset(p, 1, 4096);
        int fd = open("/dev/null", O_WRONLY);
        if (fd < 0 || write(fd, p, 4096) != 4096) _exit(4);
        free(p);
        _exit(0);
    }
    int status;
    pid_t waited;
    do
        waited = waitpid(pid, &status, 0);
    while (waited < 0 && errno == EINTR); /* SIGUSR1 (not SA_RESTART) */
    if (waited != pid) return fail("waitpid failed");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return fail("a child did not exit 0");
    atomic_fetch_add(&forks, 1);
}

static void load_plugin(void) {
    void *handle = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
    if (!handle) return fail(dlerror());
    int (*value)(void) = (int (*)(void))dlsym(handle, "stress_plugin_value");
    if (!value || value() != 7) fail("the plugin misbehaved");
    dlclose(handle);
    atomic_fetch_add(&dlopens, 1);
}

/* Grows or shrinks the block, checking that the bytes it keeps are still the pattern. */
static char *churn(char *block, size_t *size, unsigned *seed) {
    size_t next = 16 + rand_r(seed) % (256 * 1024);
    char *moved = realloc(block, next);
    if (!moved) {
        fail("realloc returned NULL");
        return block;
    }
    size_t kept = *size < next ? *size : next;
    for (size_t i = 0; i < kept; i += 509)
        if (moved[i] != (char)(i % 251)) {
            fail("realloc lost data");
            break;
        }
    for (size_t i = 0; i < next; i += 509) moved[i] = (char)(i % 251);
    *size = next;
    return moved;
}

static void jumpable_writes(int fd) {
    if (sigsetjmp(env, 1)) {
        armed = 0;
        atomic_fetch_add(&jumps, 1);
        free(malloc(1)); /* the next interposed call drops the mark the jump left */
        return;
    }
    armed = 1;
    for (int i = 0; i < 1000; i++) {
        char byte = 0;
        if (write(fd, &byte, 1) != 1) fail("write failed");
    }
    armed = 0;
}

static void *worker(void *arg) {
    struct worker *self = arg;
    unsigned seed = 12345u + self->index;
    int fd = open("/dev/null", O_WRONLY);
    if (fd < 0) fail("open failed");
    char *block = NULL;
    size_t size = 0;
    double start = now_ms(), next_fork = start + 10 * self->index, next_load = start + 25 + 10 * self->index;
    while (now_ms() - start < run_ms) {
        double t = now_ms();
        fsprof_mark(work, "slice");
        spin_us(100 + rand_r(&seed) % 200); /* random lengths: never in step with sampling */
        fsprof_unmark();
        self->marked += now_ms() - t;
        block = churn(block, &size, &seed);
        jumpable_writes(fd);
        spin_us(50 + rand_r(&seed) % 100);
        if (now_ms() > next_fork) {
            fork_child();
            next_fork += 50;
        }
        if (now_ms() > next_load) {
            load_plugin();
            next_load += 50;
        }
    }
    free(block);
    close(fd);
    self->total = now_ms() - start;
    atomic_fetch_sub(&running, 1);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 6 || strcmp(argv[4], "--truth") != 0) {
        fprintf(stderr, "usage: stress WORKERS SECONDS PLUGIN --truth FILE\n");
        return 2;
    }
    alarm(60); /* a hang ends the program (and fails its test) */
    int count = atoi(argv[1]);
    if (count < 1 || count > MAX_WORKERS) return 2;
    run_ms = atof(argv[2]) * 1e3;
    plugin = argv[3];
    work = fsprof_feature_new("work");
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_usr1;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGUSR1, &action, NULL) != 0) return 3;
    static struct worker workers[MAX_WORKERS];
    double start = now_ms();
    atomic_store(&running, count);
    for (int i = 0; i < count; i++) {
        workers[i].index = i;
        if (pthread_create(&workers[i].thread, NULL, worker, &workers[i]) != 0) return 3;
    }
    struct timespec pause = {0, 1000000};
    while (atomic_load(&running) > 0) {
        for (int i = 0; i < count; i++) pthread_kill(workers[i].thread, SIGUSR1);
        nanosleep(&pause, NULL);
    }
    double total = now_ms() - start, marked = 0;
    for (int i = 0; i < count; i++) {
        pthread_join(workers[i].thread, NULL);
        total += workers[i].total;
        marked += workers[i].marked;
    }
    FILE *out = fopen(argv[5], "w");
    if (!out) return 3;
    fprintf(out,
            "{\"total_ms\": %.3f, \"features\": {\"work\": {\"ms\": %.3f, \"instances\": "
            "{\"slice\": %.3f}}}, \"jumps\": %ld, \"forks\": %ld, \"dlopens\": %ld}\n",
            total, marked, marked, atomic_load(&jumps), atomic_load(&forks), atomic_load(&dlopens));
    fclose(out);
    return atomic_load(&failed) ? 1 : 0;
}
