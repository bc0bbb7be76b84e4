/* contended.c: lock contention with a known cost. A holder thread keeps a mutex for 2 ms at a
 * time while it works; a waiter thread takes the same mutex whenever the holder has it (then
 * spins 0.5 ms) and times how long pthread_mutex_lock blocks it. No marks of its own: the waits
 * are the agent's `locks`.
 *
 *   contended SECONDS --truth FILE
 *
 * It runs SECONDS, and on until the waiter has waited 400 ms (at most four times SECONDS): how
 * long it waits depends on how often the two threads run at once, 210 to 2037 ms in 3 s.
 *
 * Writes {"total_ms": T, "extra": {"waited_ms": W, "locks": N}, "features": {}}: W is the
 * waiter's time inside pthread_mutex_lock (what the report's `locks` blocked_ms must show). */
#include "clock.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static int stop; /* set by the waiter when it is done: the holder stops too */
/* Set while the holder holds the mutex: the waiter tries it only then, so that each of its
 * locks waits, even when the machine's other load keeps the two threads from running at once. */
static int held;

static void *holder(void *arg) {
    (void)arg;
    while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&mutex);
        __atomic_store_n(&held, 1, __ATOMIC_RELEASE);
        spin_us(2000);
        __atomic_store_n(&held, 0, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&mutex);
        spin_us(1000);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4 || strcmp(argv[2], "--truth") != 0) {
        fprintf(stderr, "usage: contended SECONDS --truth FILE\n");
        return 2;
    }
    double start = now_ms();
    double end_ms = start + atof(argv[1]) * 1000, limit_ms = start + 4 * atof(argv[1]) * 1000;
    pthread_t thread;
    pthread_create(&thread, NULL, holder, NULL);
    double waited = 0;
    long locks = 0;
    for (;;) {
        double now = now_ms();
        if (now >= limit_ms || (now >= end_ms && waited >= 400))
            break;
        while (!__atomic_load_n(&held, __ATOMIC_ACQUIRE) && now_ms() < limit_ms)
            ;
        double t0 = now_ms();
        pthread_mutex_lock(&mutex);
        waited += now_ms() - t0;
        locks++;
        pthread_mutex_unlock(&mutex);
        spin_us(500);
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    pthread_join(thread, NULL);
    FILE *f = fopen(argv[3], "w");
    if (!f) {
        perror(argv[3]);
        return 1;
    }
    fprintf(f, "{\"total_ms\": %f, \"extra\": {\"waited_ms\": %f, \"locks\": %ld}, \"features\": {}}\n",
            2 * (now_ms() - start), waited, locks);
    fclose(f);
    return 0;
}
