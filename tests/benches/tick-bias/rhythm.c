// rhythm SECS: one thread that loops 700 us of CPU in spin_hashing, a 500 us sleep and 300 us
// of CPU in spin_unmarked (the e2e test `sleepy`'s rhythm, in C and without marks), and writes
// when each phase began to events.txt: the truth for where samples of its CPU time should fall
// (about 70% in spin_hashing). See tick-bias.sh.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long clock_ns(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return t.tv_sec * 1000000000L + t.tv_nsec;
}
__attribute__((noinline)) void spin_hashing(long ns) {
  long s = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  while (clock_ns(CLOCK_THREAD_CPUTIME_ID) - s < ns) {}
}
__attribute__((noinline)) void spin_unmarked(long ns) {
  long s = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  while (clock_ns(CLOCK_THREAD_CPUTIME_ID) - s < ns) {}
}
#define MOST 40000
static long began[MOST][3];
int main(int argc, char **argv) {
  long end = clock_ns(CLOCK_MONOTONIC) + (long)(atof(argv[1]) * 1e9);
  struct timespec sleep = {0, 500000};
  int n = 0;
  while (clock_ns(CLOCK_MONOTONIC) < end && n < MOST) {
    began[n][0] = clock_ns(CLOCK_MONOTONIC);
    spin_hashing(700000);
    began[n][1] = clock_ns(CLOCK_MONOTONIC);
    nanosleep(&sleep, 0);
    began[n][2] = clock_ns(CLOCK_MONOTONIC);
    spin_unmarked(300000);
    n++;
  }
  FILE *f = fopen("events.txt", "w");
  for (int i = 0; i < n; i++) fprintf(f, "%ld %ld %ld\n", began[i][0], began[i][1], began[i][2]);
  fprintf(f, "%ld 0 0\n", clock_ns(CLOCK_MONOTONIC));
  fclose(f);
  return 0;
}
