/* callcost.c: the cost of libc calls the agent interposes, for BENCHMARKS.md. Prints, for each
 * case, nanoseconds per call (best of 5 batches): write(2) of one byte to /dev/null,
 * malloc(32)+free, pthread_mutex_lock+unlock (uncontended), and fputc to a /dev/null FILE.
 * Run it alone and under LD_PRELOAD=libfsprof_agent.so; tests/benches/agent-overhead.sh
 * interleaves the two. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

#define BEST(label, n, body)                                      \
    do {                                                          \
        double best = 1e30;                                       \
        for (int round = 0; round < 5; round++) {                 \
            double t0 = now_ns();                                 \
            for (long i = 0; i < (n); i++) { body; }              \
            double per = (now_ns() - t0) / (n);                   \
            if (per < best) best = per;                           \
        }                                                         \
        printf("%s %.2f\n", label, best);                         \
    } while (0)

int main(void) {
    int fd = open("/dev/null", O_WRONLY);
    FILE *f = fopen("/dev/null", "w");
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    char c = 'x';
    BEST("write", 2000000, if (write(fd, &c, 1) != 1) return 1);
    BEST("malloc+free", 10000000, void *volatile p = malloc(32); free(p));
    BEST("mutex", 10000000, pthread_mutex_lock(&m); pthread_mutex_unlock(&m));
    BEST("fputc", 10000000, fputc('x', f));
    return 0;
}
