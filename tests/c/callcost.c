/* callcost.c: what an interposer (LD_PRELOAD=libfsprof_agent.so, say) adds to each libc call it
 * wraps, measured side by side inside one process, for BENCHMARKS.md.
 *
 * For each case, batches of calls through libc's own definition (dlsym on libc.so.6) alternate
 * with batches through the definition the program's calls bind to (dlsym(RTLD_DEFAULT, ...): the
 * interposer's when one is preloaded, libc's otherwise), both called through a function pointer.
 * Pairing the two batches of each round cancels the host's drift, which between separate runs of
 * a program is larger than the few nanoseconds measured. Prints one line per case:
 *
 *     case  libc-ns  bound-ns  added-ns  q25  q75
 *
 * ns per call (medians over the rounds), and the median and quartiles of the paired difference
 * bound - libc. Without a preload the difference is noise around zero.
 *
 * Cases: write(2) of one byte to /dev/null; malloc(32)+free (two calls); an uncontended
 * pthread_mutex_lock+unlock (two calls); fputc to a /dev/null FILE; syscall(SYS_futex, ...) of a
 * FUTEX_WAKE that wakes nobody (what Rust's locks make on a contended unlock). Build: gcc -O2
 * callcost.c. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { ROUNDS = 400 };

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double quantile(const double *values, double q) {
    static double sorted[ROUNDS];
    memcpy(sorted, values, sizeof sorted);
    qsort(sorted, ROUNDS, sizeof sorted[0], by_value);
    return sorted[(int)(q * (ROUNDS - 1))];
}

static void *libc_handle;

/* The definition of `name` in libc, and the one the program binds to; exits if either is missing. */
static void pair(const char *name, void **libc, void **bound) {
    *libc = dlsym(libc_handle, name);
    *bound = dlsym(RTLD_DEFAULT, name);
    if (!*libc || !*bound) {
        fprintf(stderr, "callcost: no %s\n", name);
        exit(1);
    }
}

/* Runs `body` `calls` times per batch, with `which` 0 (libc's definitions) and 1 (the bound ones)
 * in turn, and prints the line for `label`. */
#define CASE(label, calls, body)                                                  \
    do {                                                                          \
        static double t[2][ROUNDS], added[ROUNDS];                                \
        for (int round = 0; round < ROUNDS; round++) {                            \
            for (int k = 0; k < 2; k++) {                                         \
                int which = (k + round) % 2; /* alternate which goes first */     \
                double t0 = now_ns();                                             \
                for (long i = 0; i < (calls); i++) { body; }                      \
                t[which][round] = (now_ns() - t0) / (calls);                      \
            }                                                                     \
            added[round] = t[1][round] - t[0][round];                             \
        }                                                                         \
        printf("%-12s %8.2f %8.2f %+7.2f %+7.2f %+7.2f\n", label,                 \
               quantile(t[0], 0.5), quantile(t[1], 0.5), quantile(added, 0.5),   \
               quantile(added, 0.25), quantile(added, 0.75));                     \
    } while (0)

typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef void *(*malloc_fn)(size_t);
typedef void (*free_fn)(void *);
typedef int (*mutex_fn)(pthread_mutex_t *);
typedef int (*fputc_fn)(int, FILE *);

int main(void) {
    libc_handle = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    if (!libc_handle) {
        fprintf(stderr, "callcost: %s\n", dlerror());
        return 1;
    }
    ssize_t (*write_[2])(int, const void *, size_t);
    void *(*malloc_[2])(size_t);
    void (*free_[2])(void *);
    int (*lock[2])(pthread_mutex_t *), (*unlock[2])(pthread_mutex_t *);
    int (*fputc_[2])(int, FILE *);
    long (*syscall_[2])(long, ...);
    pair("write", (void **)&write_[0], (void **)&write_[1]);
    pair("malloc", (void **)&malloc_[0], (void **)&malloc_[1]);
    pair("free", (void **)&free_[0], (void **)&free_[1]);
    pair("pthread_mutex_lock", (void **)&lock[0], (void **)&lock[1]);
    pair("pthread_mutex_unlock", (void **)&unlock[0], (void **)&unlock[1]);
    pair("fputc", (void **)&fputc_[0], (void **)&fputc_[1]);
    pair("syscall", (void **)&syscall_[0], (void **)&syscall_[1]);

    int fd = open("/dev/null", O_WRONLY);
    FILE *f = fopen("/dev/null", "w");
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    char c = 'x';
    CASE("write", 5000, if (write_[which](fd, &c, 1) != 1) return 1);
    CASE("malloc+free", 100000, void *volatile p = malloc_[which](32); free_[which](p));
    CASE("mutex", 100000, lock[which](&m); unlock[which](&m));
    CASE("fputc", 100000, fputc_[which]('x', f));
    static int word;
    CASE("futex-wake", 5000, if (syscall_[which](SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1) != 0) return 1);
    return 0;
}
