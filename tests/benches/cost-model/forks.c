// forks N: fork and exec /bin/true N times, one after another; prints the elapsed time.
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
  int n = atoi(argv[1]); double s = now();
  for (int i = 0; i < n; i++) { pid_t p = fork(); if (p == 0) { execl("/bin/true", "true", (char *)0); _exit(127); } int st; waitpid(p, &st, 0); }
  printf("forks elapsed=%.4f\n", now() - s); return 0;
}
