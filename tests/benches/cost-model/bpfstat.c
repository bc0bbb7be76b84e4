// Prints every loaded BPF program's id, name, run count and run time (kernel.bpf_stats_enabled=1),
// every INTERVAL seconds until killed: "T id name run_cnt run_time_ns".
#include <linux/bpf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static long bpf(int cmd, union bpf_attr *a) { return syscall(__NR_bpf, cmd, a, sizeof(*a)); }
int main(int argc, char **argv) {
  double every = argc > 1 ? atof(argv[1]) : 0.2;
  for (;;) {
    struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
    unsigned id = 0;
    for (;;) {
      union bpf_attr a; memset(&a, 0, sizeof a); a.start_id = id;
      if (bpf(BPF_PROG_GET_NEXT_ID, &a)) break;
      id = a.next_id;
      union bpf_attr g; memset(&g, 0, sizeof g); g.prog_id = id;
      int fd = bpf(BPF_PROG_GET_FD_BY_ID, &g);
      if (fd < 0) continue;
      struct bpf_prog_info info; memset(&info, 0, sizeof info);
      union bpf_attr q; memset(&q, 0, sizeof q);
      q.info.bpf_fd = fd; q.info.info_len = sizeof info; q.info.info = (unsigned long)&info;
      if (bpf(BPF_OBJ_GET_INFO_BY_FD, &q) == 0)
        printf("%.3f %u %s %llu %llu\n", ts.tv_sec + ts.tv_nsec / 1e9, id, info.name,
               (unsigned long long)info.run_cnt, (unsigned long long)info.run_time_ns);
      close(fd);
    }
    fflush(stdout);
    if (every <= 0) break;
    usleep(every * 1e6);
  }
  return 0;
}
