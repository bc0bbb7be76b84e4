/* A CPU loop interrupted by a timer signal every 100 us (SIGALRM, whose handler counts it), for
 * about SECONDS (default 1.5). Every 2 ms of the loop it reads its own TracerPid
 * (/proc/thread-self/status): a profiler that stays attached between its samples makes every
 * such signal wait for it. Prints "checks N traced M signals S". */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t signals;
static void on_alarm(int s) { (void)s; signals++; }

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

/* Whether this thread is traced now; -1 if its status cannot be read. */
static int traced(void) {
  char text[4096];
  int fd = open("/proc/thread-self/status", O_RDONLY);
  if (fd < 0) return -1;
  ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return -1;
  text[n] = 0;
  const char *at = strstr(text, "TracerPid:");
  return at ? atoi(at + strlen("TracerPid:")) != 0 : -1;
}

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 1.5;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &sa, 0);
  struct itimerval every = {{0, 100}, {0, 100}};
  setitimer(ITIMER_REAL, &every, 0);
  long checks = 0, traced_checks = 0;
  volatile unsigned long x = 0;
  double start = now(), next = start;
  for (;;) {
    for (unsigned long i = 0; i < 100000; i++) x += i;
    double t = now();
    if (t >= next) {
      int state = traced();
      if (state < 0) return 2;
      checks++;
      traced_checks += state;
      next = t + 0.002;
    }
    if (t - start >= seconds) break;
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, 0);
  printf("checks %ld traced %ld signals %ld\n", checks, traced_checks, (long)signals);
  return 0;
}
