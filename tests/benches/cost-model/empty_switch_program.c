// Loads a BPF program at the sched_switch raw tracepoint that does nothing (variant 0), calls
// bpf_get_current_pid_tgid (1), and also reads 4 bytes of the next task with
// bpf_probe_read_kernel (2), then sleeps SECONDS: the floor of what any program there costs a
// switch, for tests/benches/unwatched-switch.sh. Usage: empty_switch_program VARIANT SECONDS
#include <linux/bpf.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdlib.h>
static long bpf(int cmd, union bpf_attr *a) { return syscall(__NR_bpf, cmd, a, sizeof(*a)); }
int main(int argc, char **argv) {
  int variant = argc > 1 ? atoi(argv[1]) : 0;
  struct bpf_insn p[16]; int n = 0;
  p[n++] = (struct bpf_insn){.code = BPF_ALU64|BPF_MOV|BPF_X, .dst_reg = 6, .src_reg = 1};
  if (variant >= 1) p[n++] = (struct bpf_insn){.code = BPF_JMP|BPF_CALL, .imm = BPF_FUNC_get_current_pid_tgid};
  if (variant >= 2) { // probe_read_kernel of 4 bytes of ctx[2]+pid offset into stack
    p[n++] = (struct bpf_insn){.code = BPF_LDX|BPF_MEM|BPF_DW, .dst_reg = 3, .src_reg = 6, .off = 16};
    p[n++] = (struct bpf_insn){.code = BPF_ALU64|BPF_ADD|BPF_K, .dst_reg = 3, .imm = 2000};
    p[n++] = (struct bpf_insn){.code = BPF_ALU64|BPF_MOV|BPF_X, .dst_reg = 1, .src_reg = 10};
    p[n++] = (struct bpf_insn){.code = BPF_ALU64|BPF_ADD|BPF_K, .dst_reg = 1, .imm = -8};
    p[n++] = (struct bpf_insn){.code = BPF_ALU64|BPF_MOV|BPF_K, .dst_reg = 2, .imm = 4};
    p[n++] = (struct bpf_insn){.code = BPF_JMP|BPF_CALL, .imm = BPF_FUNC_probe_read_kernel};
  }
  p[n++] = (struct bpf_insn){.code = BPF_ALU64|BPF_MOV|BPF_K, .dst_reg = 0, .imm = 0};
  p[n++] = (struct bpf_insn){.code = BPF_JMP|BPF_EXIT};
  union bpf_attr a; memset(&a, 0, sizeof a);
  a.prog_type = BPF_PROG_TYPE_RAW_TRACEPOINT; a.insn_cnt = n; a.insns = (unsigned long)p;
  a.license = (unsigned long)"GPL";
  char log[4096]; a.log_buf = (unsigned long)log; a.log_size = sizeof log; a.log_level = 1;
  int fd = bpf(BPF_PROG_LOAD, &a);
  if (fd < 0) { perror("load"); puts(log); return 1; }
  union bpf_attr o; memset(&o, 0, sizeof o);
  o.raw_tracepoint.name = (unsigned long)"sched_switch"; o.raw_tracepoint.prog_fd = fd;
  if (bpf(BPF_RAW_TRACEPOINT_OPEN, &o) < 0) { perror("attach"); return 1; }
  sleep(atoi(argc > 2 ? argv[2] : "5"));
}
