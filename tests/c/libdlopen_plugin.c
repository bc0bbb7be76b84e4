/* libdlopen_plugin.c: a library whose constructor, run inside dlopen with the dynamic loader's
 * lock held, takes a mutex of the program that loads it (dlopen_locks.c). */
#include <pthread.h>
#include <stdatomic.h>

extern pthread_mutex_t registry_lock;
extern atomic_int plugin_waiting;

__attribute__((constructor)) static void registered(void) {
    atomic_store(&plugin_waiting, 1);
    pthread_mutex_lock(&registry_lock);
    pthread_mutex_unlock(&registry_lock);
}
