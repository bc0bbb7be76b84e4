/* builtins.c: a C program with known output, allocation and lock behaviour and no marks of its
 * own, for the end-to-end test of the agent's built-in features. One thread runs, for SECONDS,
 * a random mix of: write() of 1 MiB to a temporary file (output), fprintf + fflush of 64 KiB
 * to another (output, stdio: counted once), calloc of 256 KiB then free (allocation), a
 * pthread_cond_timedwait that times out after 100-400 µs (waiting), unmarked spinning, and more
 * rarely fork() (or _Fork()) of a child that makes built-in calls of its own before it exits,
 * and waitpid() for it (process). It times each call and writes the ground truth as JSON:
 *
 *   builtins SECONDS --truth FILE
 *
 * {"total_ms": T, "features": {"output": {"ms": M, "instances": {}}, ...}}. One thread, never
 * blocked outside those calls, so the total is the loop's wall time. Exits with status 3 if a
 * call fails or a child does not exit with status 0 (a child that returns from the agent's
 * fork wrapper must not touch its parent's region, which is not mapped in it). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

static unsigned long rng = 88172645463325252UL;
static unsigned long next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static char chunk[1024 * 1024];
static char line[64 * 1024 + 1];

__attribute__((noinline)) static double write_chunk(int fd) {
    double t0 = now_ms();
    if (write(fd, chunk, sizeof chunk) < 0) exit(3);
    double t1 = now_ms();
    lseek(fd, 0, SEEK_SET);
    return t1 - t0;
}

__attribute__((noinline)) static double print_line(FILE *f) {
    double t0 = now_ms();
    fprintf(f, "%s\n", line);
    fflush(f);
    double t1 = now_ms();
    rewind(f);
    return t1 - t0;
}

__attribute__((noinline)) static double allocate(void) {
    double t0 = now_ms();
    char *p = calloc(256 * 1024, 1);
    double t1 = now_ms();
    if (!p) exit(3);
    p[next() % (256 * 1024)] = 1; /* used, so not optimised away */
    double t2 = now_ms();
    free(p);
    double t3 = now_ms();
    return (t1 - t0) + (t3 - t2);
}

__attribute__((noinline)) static double wait_for_nothing(pthread_cond_t *cond, pthread_mutex_t *mutex) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 100000 + next() % 300000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec += 1;
        until.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(mutex);
    double t0 = now_ms();
    pthread_cond_timedwait(cond, mutex, &until);
    double t1 = now_ms();
    pthread_mutex_unlock(mutex);
    return t1 - t0;
}

/* fork(), or every other time _Fork() where glibc has it (2.34: fork without the atfork
 * handlers, which the agent interposes so that the child still forgets its parent's region). */
static pid_t fork_either(void) {
#if defined(__GLIBC__)
#if __GLIBC_PREREQ(2, 34)
    static int turn;
    if (turn++ % 2) return _Fork();
#endif
#endif
    return fork();
}

__attribute__((noinline)) static double spawn_child(FILE *f) {
    double t0 = now_ms();
    pid_t pid = fork_either();
    if (pid < 0) exit(3);
    if (pid == 0) {
        /* The child: built-in calls of its own (a region of its own), then a normal exit. */
        for (int i = 0; i < 16; i++) free(malloc(4096));
        fprintf(f, "child\n");
        exit(0);
    }
    double t1 = now_ms();
    int status;
    double t2 = now_ms();
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) exit(3);
    double t3 = now_ms();
    rewind(f);
    return (t1 - t0) + (t3 - t2);
}

int main(int argc, char **argv) {
    if (argc != 4 || strcmp(argv[2], "--truth") != 0) {
        fprintf(stderr, "usage: builtins SECONDS --truth FILE\n");
        return 2;
    }
    double run_ms = atof(argv[1]) * 1e3;
    memset(chunk, 'x', sizeof chunk);
    memset(line, 'y', sizeof line - 1);
    char path[] = "/tmp/fsprof-builtins-XXXXXX";
    int fd = mkstemp(path);
    char path2[] = "/tmp/fsprof-builtins-XXXXXX";
    int fd2 = mkstemp(path2);
    if (fd < 0 || fd2 < 0) return 3;
    unlink(path);
    unlink(path2);
    FILE *f = fdopen(fd2, "w");
    pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
    pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
    double output = 0, allocation = 0, waiting = 0, process = 0;
    double start = now_ms();
    while (now_ms() - start < run_ms) {
        if (next() % 50 == 0) { /* rare: a fork costs about 2 ms */
            process += spawn_child(f);
            continue;
        }
        switch (next() % 10) {
        case 0: case 1: output += write_chunk(fd); break;
        case 2: case 3: output += print_line(f); break;
        case 4: case 5: for (int i = 0; i < 8; i++) allocation += allocate(); break;
        case 6: waiting += wait_for_nothing(&cond, &mutex); break;
        default: spin_us(200 + next() % 600); break;
        }
    }
    double total = now_ms() - start;
    FILE *out = fopen(argv[3], "w");
    if (!out) return 3;
    fprintf(out,
            "{\"total_ms\": %.3f, \"features\": {\"output\": {\"ms\": %.3f, \"instances\": {}}, "
            "\"allocation\": {\"ms\": %.3f, \"instances\": {}}, \"waiting\": {\"ms\": %.3f, "
            "\"instances\": {}}, \"process\": {\"ms\": %.3f, \"instances\": {}}}}\n",
            total, output, allocation, waiting, process);
    fclose(out);
    return 0;
}
