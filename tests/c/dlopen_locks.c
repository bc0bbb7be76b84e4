/* dlopen_locks.c: interposed calls made while another thread is inside dlopen (holding the
 * dynamic loader's lock) and waits, in the constructor of the library it loads, for a mutex this
 * thread holds. Without the agent the program always finishes; an agent that took the loader's
 * lock on an interposed call's path (dladdr, dlsym, a thread-local destructor's registration)
 * would deadlock it.
 *
 *   dlopen_locks MODE PLUGIN
 *
 * MODE: `libc-call` (strdup: libc calls malloc, whose call site the agent looks for outside
 * libc), `first-call` (functions this process has not called before), `new-thread` (a thread
 * created and joined meanwhile, which claims its mark slot at start), or `all`. PLUGIN: the path
 * of libdlopen_plugin.so. Prints "ok" and exits 0; exits 3 if a call fails. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The program's, taken by the plugin's constructor. */
pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
/* Set by the plugin's constructor just before it waits for registry_lock. */
atomic_int plugin_waiting;

static const char *plugin;

static void *loader(void *arg) {
    (void)arg;
    if (!dlopen(plugin, RTLD_NOW)) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        exit(3);
    }
    return NULL;
}

static void *nothing(void *arg) { return arg; }

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: dlopen_locks MODE PLUGIN\n");
        return 2;
    }
    const char *mode = argv[1];
    int all = strcmp(mode, "all") == 0;
    plugin = argv[2];
    pthread_mutex_lock(&registry_lock);
    pthread_t t;
    if (pthread_create(&t, NULL, loader, NULL) != 0) return 3;
    /* Wait (with a deadline) until the loader thread is in the constructor, loader lock held. */
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (!atomic_load(&plugin_waiting)) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec > 5) return 3;
    }
    if (all || strcmp(mode, "libc-call") == 0) {
        char *volatile copy = strdup("registry entry"); /* libc -> malloc */
        if (!copy) return 3;
        free(copy);
    }
    if (all || strcmp(mode, "first-call") == 0) {
        struct stat st;
        struct timespec zero = {0, 0};
        fdatasync(-1);
        fsync(-1);
        lstat("/", &st);
        nanosleep(&zero, NULL);
        poll(NULL, 0, 0);
        pread(-1, NULL, 0, 0);
    }
    if (all || strcmp(mode, "new-thread") == 0) {
        pthread_t n;
        if (pthread_create(&n, NULL, nothing, NULL) != 0) return 3;
        pthread_join(n, NULL);
    }
    pthread_mutex_unlock(&registry_lock);
    pthread_join(t, NULL);
    puts("ok");
    return 0;
}
