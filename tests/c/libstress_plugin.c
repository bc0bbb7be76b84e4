/* libstress_plugin.c: a library that stress.c loads and unloads over and over; its constructor
 * allocates and takes a lock, as many real plugins' do. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t plugin_lock = PTHREAD_MUTEX_INITIALIZER;
static char *state;

__attribute__((constructor)) static void init(void) {
    pthread_mutex_lock(&plugin_lock);
    state = malloc(256);
    if (state) memset(state, 7, 256);
    pthread_mutex_unlock(&plugin_lock);
}

__attribute__((destructor)) static void fini(void) { free(state); }

int stress_plugin_value(void) { return state ? state[255] : -1; }
