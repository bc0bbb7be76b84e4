// spin N ITERS: N threads, each a hash loop of ITERS steps; prints the wall time, the process's
// CPU time (its threads', user and kernel) and how many threads ran (each thread's first
// instant), so that a profiler's thread count has a truth; and the CPU time its parent's
// threads (fsprof's, under `fsprof run`) used meanwhile. With SPIN_SEGMENTS=K (at most 64) each
// thread also reads its own CPU clock after each K-th of its steps, and the line ends with
// `segments=` and the threads' CPU milliseconds in each K-th, summed: where in the run a
// profiler's cost falls (its start, or every sample alike).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <dirent.h>
#include <unistd.h>
static long iters;
static double clock_s(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static double now(void) { return clock_s(CLOCK_MONOTONIC); }
// The CPU time of the parent's threads so far (their schedstat's first field, ns).
static double parent_cpu(void) {
  char dir[64], file[128];
  snprintf(dir, sizeof dir, "/proc/%d/task", (int)getppid());
  DIR *d = opendir(dir);
  double sum = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    snprintf(file, sizeof file, "%s/%s/schedstat", dir, e->d_name);
    FILE *f = fopen(file, "r");
    long ns;
    if (f && fscanf(f, "%ld", &ns) == 1) sum += ns / 1e9;
    if (f) fclose(f);
  }
  if (d) closedir(d);
  return sum;
}
#define MOST_SEGMENTS 64
static int segments;
static double (*segment_ms)[MOST_SEGMENTS];
static void *work(void *arg) {
  unsigned long h = (unsigned long)arg;
  if (!segments) {
    for (long i = 0; i < iters; i++) h = h * 6364136223846793005UL + 1442695040888963407UL + (h >> 29);
    return (void *)(h & 1);
  }
  double before = clock_s(CLOCK_THREAD_CPUTIME_ID);
  for (int k = 0; k < segments; k++) {
    for (long i = 0; i < iters / segments; i++) h = h * 6364136223846793005UL + 1442695040888963407UL + (h >> 29);
    double after = clock_s(CLOCK_THREAD_CPUTIME_ID);
    segment_ms[(long)arg][k] = 1000 * (after - before);
    before = after;
  }
  return (void *)(h & 1);
}
int main(int argc, char **argv) {
  int n = atoi(argv[1]); iters = atol(argv[2]);
  pthread_t *t = malloc(n * sizeof *t);
  if (getenv("SPIN_SEGMENTS")) {
    segments = atoi(getenv("SPIN_SEGMENTS"));
    segments = segments < 0 ? 0 : segments > MOST_SEGMENTS ? MOST_SEGMENTS : segments;
    segment_ms = calloc(n, sizeof *segment_ms);
  }
  double parent = parent_cpu(), s = now();
  for (int i = 0; i < n; i++) pthread_create(&t[i], 0, work, (void *)(long)i);
  long x = 0; for (int i = 0; i < n; i++) { void *r; pthread_join(t[i], &r); x += (long)r; }
  double elapsed = now() - s;
  printf("spin threads=%d elapsed=%.4f cpu=%.4f x=%ld parent_cpu=%.4f", n, elapsed,
         clock_s(CLOCK_PROCESS_CPUTIME_ID), x, parent_cpu() - parent);
  for (int k = 0; k < segments; k++) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += segment_ms[i][k];
    printf("%s%.3f", k ? "," : " segments=", sum);
  }
  printf("\n");
  return 0;
}
