/* libfork_early.c: a library initialised before the agent (a dependency of the program, which
 * the loader initialises before the preloaded agent) whose fork child handler allocates: glibc
 * runs child handlers in registration order, so this one runs in the child before the agent's. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static void *volatile kept;

static void child(void) {
    kept = malloc(64);
    memset(kept, 1, 64);
    free(kept);
    kept = calloc(2, 32);
    free(kept);
}

__attribute__((constructor)) static void init(void) { pthread_atfork(NULL, NULL, child); }

void fork_early_linked(void) {}
