/* jump_out.c: a thread writes to /dev/null while SIGUSR1's handler siglongjmps out of whatever
 * interposed call it interrupted (POSIX allows leaving an async-signal-safe function that way;
 * bash and psql do), until it has jumped JUMPS times (or for 10 s at most); then that thread, and a new thread after it exits (which
 * takes over its mark slot), each do WORK seconds of work, half of it marked `after` (instances
 * `victim` and `heir`), and time it.
 *
 *   jump_out JUMPS WORK MODE --truth FILE
 *
 * MODE: `interposed` jumps with siglongjmp as the program links it (the agent's, when preloaded);
 * `behind` with libc's own, which the agent does not see. Ground truth, as JSON:
 * {"total_ms": T, "jumps": J, "features": {"after": {"ms": M, "instances": {"victim": V,
 * "heir": H}}}}; T is the time of every thread that runs or sleeps in an interposed call: the
 * signalling main thread's while the victim jumps, the victim's and the heir's. Exits 3 if a
 * call fails. */
#define _GNU_SOURCE
#include "fsprof.h"
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"

static sigjmp_buf env;
static volatile sig_atomic_t armed;
static void (*jump)(sigjmp_buf, int);
static long jumps_wanted;
static double work_ms;
static atomic_int done_jumping;
static double victim_marked, heir_marked, victim_total, heir_total;
static long jumps;
static const fsprof_feature *after;

static void on_usr1(int sig) {
    (void)sig;
    if (armed) jump(env, 1);
}

/* WORK ms: slices of 50 to 250 us (lengths drawn at random, so that no sampling period is in
 * step with them), every other one marked; returns the marked time. */
static double marked_work(const char *instance) {
    double start = now_ms(), marked = 0;
    unsigned seed = 1;
    while (now_ms() - start < work_ms) {
        double t = now_ms();
        fsprof_mark(after, instance);
        spin_us(50 + rand_r(&seed) % 200);
        fsprof_unmark();
        marked += now_ms() - t;
        spin_us(50 + rand_r(&seed) % 200);
    }
    return marked;
}

static void *victim(void *arg) {
    (void)arg;
    double start = now_ms();
    int fd = open("/dev/null", O_WRONLY);
    if (fd < 0) exit(3);
    while (jumps < jumps_wanted && now_ms() - start < 10000) {
        if (sigsetjmp(env, 1)) {
            jumps++;
            continue;
        }
        armed = 1;
        for (int i = 0; i < 1000; i++) {
            char byte = 0;
            if (write(fd, &byte, 1) != 1) exit(3);
        }
        armed = 0;
    }
    armed = 0;
    atomic_store(&done_jumping, 1);
    victim_marked = marked_work("victim");
    victim_total = now_ms() - start;
    return NULL;
}

static void *heir(void *arg) {
    (void)arg;
    double start = now_ms();
    heir_marked = marked_work("heir");
    heir_total = now_ms() - start;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 6 || strcmp(argv[4], "--truth") != 0) {
        fprintf(stderr, "usage: jump_out JUMPS WORK MODE --truth FILE\n");
        return 2;
    }
    alarm(60); /* a hang ends the program (and fails its test) */
    jumps_wanted = atol(argv[1]);
    work_ms = atof(argv[2]) * 1e3;
    jump = siglongjmp;
    if (strcmp(argv[3], "behind") == 0) {
        void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
        if (!libc || !(jump = (void (*)(sigjmp_buf, int))dlsym(libc, "siglongjmp"))) return 3;
    }
    after = fsprof_feature_new("after");
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_usr1;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGUSR1, &action, NULL) != 0) return 3;
    double start = now_ms();
    pthread_t t;
    if (pthread_create(&t, NULL, victim, NULL) != 0) return 3;
    while (!atomic_load(&done_jumping)) {
        pthread_kill(t, SIGUSR1);
        spin_us(100);
    }
    double signalling = now_ms() - start;
    pthread_join(t, NULL);
    if (pthread_create(&t, NULL, heir, NULL) != 0) return 3;
    pthread_join(t, NULL);
    FILE *out = fopen(argv[5], "w");
    if (!out) return 3;
    fprintf(out,
            "{\"total_ms\": %.3f, \"jumps\": %ld, \"features\": {\"after\": {\"ms\": %.3f, "
            "\"instances\": {\"victim\": %.3f, \"heir\": %.3f}}}}\n",
            signalling + victim_total + heir_total, jumps, victim_marked + heir_marked,
            victim_marked, heir_marked);
    fclose(out);
    return 0;
}
