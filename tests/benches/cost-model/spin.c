// spin N ITERS: N threads, each a hash loop of ITERS steps; prints the wall time, the process's
// CPU time (its threads', user and kernel) and how many threads ran (each thread's first
// instant), so that a profiler's thread count has a truth.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static long iters;
static double clock_s(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static double now(void) { return clock_s(CLOCK_MONOTONIC); }
static void *work(void *arg) {
  unsigned long h = (unsigned long)arg;
  for (long i = 0; i < iters; i++) h = h * 6364136223846793005UL + 1442695040888963407UL + (h >> 29);
  return (void *)(h & 1);
}
int main(int argc, char **argv) {
  int n = atoi(argv[1]); iters = atol(argv[2]);
  pthread_t *t = malloc(n * sizeof *t);
  double s = now();
  for (int i = 0; i < n; i++) pthread_create(&t[i], 0, work, (void *)(long)i);
  long x = 0; for (int i = 0; i < n; i++) { void *r; pthread_join(t[i], &r); x += (long)r; }
  printf("spin threads=%d elapsed=%.4f cpu=%.4f x=%ld\n", n, now() - s, clock_s(CLOCK_PROCESS_CPUTIME_ID), x);
  return 0;
}
