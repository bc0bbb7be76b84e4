// evcost MODE M: two threads of this process hand a byte back and forth through two pipes M
// times, pinned to one CPU (every switch is between them), with perf events of one kind opened
// on each of them first (per thread, not inherited, as fsprof opens its own), and prints the
// elapsed time and the nanoseconds per switch beyond none's (give none's time as NONE_S).
// MODE: none | tsample (task-clock sampling every 1.9 ms of the thread's CPU, fsprof's tick at
// 250 Hz) | tcount (task-clock counting) | cscount (context-switch software event, counting) |
// cssample (context-switch software event, a sample at each switch into a ring) | cpuclock
// (one cpu-clock sampling event on the CPU, pid -1, every 1.9 ms: perf record -a's).
// Run as root (or with CAP_PERFMON) for the per-CPU mode.
#define _GNU_SOURCE
#include <linux/perf_event.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int ab[2], ba[2], cpu;
static long m;
static const char *mode;
static pthread_barrier_t ready;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static int open_event(pid_t tid, int on_cpu, unsigned type, unsigned long long config,
                      unsigned long long period, int ring) {
  struct perf_event_attr a;
  memset(&a, 0, sizeof a);
  a.size = sizeof a;
  a.type = type;
  a.config = config;
  a.sample_period = period;
  a.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME;
  a.exclude_hv = 1;
  int fd = syscall(SYS_perf_event_open, &a, tid, on_cpu, -1, 0);
  if (fd < 0) {
    perror("perf_event_open");
    exit(2);
  }
  if (ring && mmap(0, 65 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED) {
    perror("mmap");
    exit(2);
  }
  return fd;
}

// The events of MODE on the calling thread.
static void events(void) {
  pid_t tid = syscall(SYS_gettid);
  if (!strcmp(mode, "tsample"))
    open_event(tid, -1, PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, 1900000, 1);
  else if (!strcmp(mode, "tcount"))
    open_event(tid, -1, PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, 0, 0);
  else if (!strcmp(mode, "cscount"))
    open_event(tid, -1, PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES, 0, 0);
  else if (!strcmp(mode, "cssample"))
    open_event(tid, -1, PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES, 1, 1);
}

static void pin(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

static void *pong(void *x) {
  char c;
  pin();
  events();
  pthread_barrier_wait(&ready);
  for (long i = 0; i < m; i++) {
    if (read(ab[0], &c, 1) != 1) break;
    if (write(ba[1], &c, 1) != 1) break;
  }
  return x;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: evcost MODE M\n");
    return 1;
  }
  mode = argv[1];
  m = atol(argv[2]);
  cpu = sysconf(_SC_NPROCESSORS_ONLN) - 1;
  if (pipe(ab) || pipe(ba)) return 1;
  pin();
  if (!strcmp(mode, "cpuclock"))
    open_event(-1, cpu, PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, 1900000, 1);
  events();
  pthread_barrier_init(&ready, 0, 2);
  pthread_t t;
  pthread_create(&t, 0, pong, 0);
  pthread_barrier_wait(&ready);
  double s = now();
  char c = 'x';
  for (long i = 0; i < m; i++) {
    if (write(ab[1], &c, 1) != 1) break;
    if (read(ba[0], &c, 1) != 1) break;
  }
  pthread_join(t, 0);
  double e = now() - s;
  const char *none = getenv("NONE_S");
  printf("evcost %s elapsed=%.4f", mode, e);
  if (none) printf(" ns_per_switch=%.0f", (e - atof(none)) * 1e9 / (2.0 * m));
  printf("\n");
  return 0;
}
