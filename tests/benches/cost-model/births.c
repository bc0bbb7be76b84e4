// births N: make N threads one after another, each doing a little work and ending; elapsed.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static void *w(void *a) { volatile unsigned long h = (unsigned long)a; for (int i = 0; i < 20000; i++) h = h * 31 + i; return 0; }
int main(int argc, char **argv) {
  int n = atoi(argv[1]); double s = now();
  for (int i = 0; i < n; i++) { pthread_t t; pthread_create(&t, 0, w, (void *)(long)i); pthread_join(t, 0); }
  printf("births elapsed=%.4f\n", now() - s); return 0;
}
