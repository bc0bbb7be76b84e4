/* unwinds.c: threads unwound through the agent's interposed functions, for the test that the agent
 * never breaks a program that unwinds (tests/tests/safety.rs). Five threads block, each in a
 * different interposed cancellation point (pthread_cond_wait, usleep, sleep, fwrite on a full
 * pipe, read on an empty one); the main thread cancels them; a sixth calls pthread_exit. Each
 * thread's cleanup handler counts. glibc unwinds a cancelled thread with libgcc_s, which it loads
 * privately, through the agent's frames and their personality routines. A C++ or Rust program's
 * exceptions take the same path with libgcc_s loaded globally.
 *
 *   unwinds
 *
 * Prints "unwound N of 6" and exits with status 0 when all six cleanup handlers ran. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int cleaned;
static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static int full_pipe[2], empty_pipe[2];

static void cleanup(void *arg) {
    (void)arg;
    __atomic_add_fetch(&cleaned, 1, __ATOMIC_SEQ_CST);
}

static void unlock(void *arg) { pthread_mutex_unlock(arg); }

static void *in_cond_wait(void *arg) {
    pthread_cleanup_push(cleanup, arg);
    pthread_mutex_lock(&mutex);
    pthread_cleanup_push(unlock, &mutex);
    for (;;)
        pthread_cond_wait(&never, &mutex);
    pthread_cleanup_pop(0);
    pthread_cleanup_pop(0);
    return NULL;
}

static void *in_usleep(void *arg) {
    pthread_cleanup_push(cleanup, arg);
    for (;;)
        usleep(100000);
    pthread_cleanup_pop(0);
    return NULL;
}

static void *in_sleep(void *arg) {
    pthread_cleanup_push(cleanup, arg);
    for (;;)
        sleep(1);
    pthread_cleanup_pop(0);
    return NULL;
}

static void *in_fwrite(void *arg) {
    static char block[1 << 16];
    pthread_cleanup_push(cleanup, arg);
    FILE *stream = fdopen(full_pipe[1], "w");
    memset(block, 'x', sizeof block);
    for (;;)
        fwrite(block, 1, sizeof block, stream);
    pthread_cleanup_pop(0);
    return NULL;
}

static void *in_read(void *arg) {
    char byte;
    pthread_cleanup_push(cleanup, arg);
    for (;;)
        if (read(empty_pipe[0], &byte, 1) < 0)
            break;
    pthread_cleanup_pop(0);
    return NULL;
}

static void *exits(void *arg) {
    pthread_cleanup_push(cleanup, arg);
    pthread_exit(NULL);
    pthread_cleanup_pop(0);
    return NULL;
}

int main(void) {
    void *(*bodies[])(void *) = {in_cond_wait, in_usleep, in_sleep, in_fwrite, in_read, exits};
    enum { THREADS = sizeof bodies / sizeof bodies[0] };
    pthread_t threads[THREADS];
    if (pipe(full_pipe) != 0 || pipe(empty_pipe) != 0)
        return 3;
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&threads[i], NULL, bodies[i], NULL) != 0)
            return 3;
    usleep(200000); /* long enough for each to block (a cancel before that is acted on later) */
    for (int i = 0; i < THREADS - 1; i++)
        pthread_cancel(threads[i]);
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    printf("unwound %d of %d\n", cleaned, THREADS);
    fflush(stdout);
    /* _exit: exit would flush the cancelled writer's stream into the full pipe, and block. */
    _exit(cleaned == THREADS ? 0 : 1);
}
