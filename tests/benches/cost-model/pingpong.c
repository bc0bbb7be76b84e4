// pingpong M: two threads hand a byte back and forth through two pipes M times (each hand-off
// a block and a wake-up); prints the elapsed time and the voluntary context switches.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static int ab[2], ba[2]; static long m;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static void *pong(void *x) { char c; for (long i = 0; i < m; i++) { if (read(ab[0], &c, 1) != 1) break; if (write(ba[1], &c, 1) != 1) break; } return x; }
static long vcs(void) { FILE *f = fopen("/proc/self/status", "r"); char l[256]; long v = 0; while (fgets(l, sizeof l, f)) if (!strncmp(l, "voluntary_ctxt_switches:", 24)) v = atol(l + 24); fclose(f); return v; }
int main(int argc, char **argv) {
  m = atol(argv[1]); if (pipe(ab) || pipe(ba)) return 1;
  pthread_t t; double s = now(); pthread_create(&t, 0, pong, 0);
  char c = 'x'; for (long i = 0; i < m; i++) { if (write(ab[1], &c, 1) != 1) break; if (read(ba[0], &c, 1) != 1) break; }
  pthread_join(t, 0);
  printf("pingpong elapsed=%.4f main_vcs=%ld\n", now() - s, vcs());
  return 0;
}
