/* short_children.c: a parent that runs short-lived children one after the other, as a build
 * runs its compilers, for the end-to-end test of following a process tree. Each child is this
 * program run again (fork, then exec of /proc/self/exe) to burn MS milliseconds of its own CPU
 * time and exit; the parent waits for each, reads its schedstat before reaping it (its time on a
 * CPU and its time waiting for one, the kernel's count, exec included: what fsprof's default
 * view counts) and its CPU time (user and system, from wait4's rusage), adds them up, then
 * writes the ground truth as JSON:
 *
 *   short_children CHILDREN MS --truth FILE
 *
 * {"children": N, "children_ms": RUNNABLE, "cpu_ms": CPU}
 *
 * The parent itself only waits: a profiler whose ticks slow down while its threads are blocked
 * must still find each child and count its whole life. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <unistd.h>

#include "clock.h"

static int burn(double ms) {
    volatile unsigned long sink = 0;
    double start = cpu_ms();
    while (cpu_ms() - start < ms)
        for (int i = 0; i < 10000; i++) sink += (unsigned long)i;
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "burn") == 0) return burn(atof(argv[2]));
    if (argc != 5 || strcmp(argv[3], "--truth") != 0) {
        fprintf(stderr, "usage: short_children CHILDREN MS --truth FILE\n");
        return 2;
    }
    int children = atoi(argv[1]);
    double runnable_ms = 0, cpu_ms_total = 0;
    for (int i = 0; i < children; i++) {
        pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) {
            execl("/proc/self/exe", "short_children", "burn", argv[2], (char *)NULL);
            _exit(127);
        }
        /* Exited, not yet reaped: its schedstat still holds its whole life. */
        siginfo_t info;
        if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT) != 0) return 1;
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/schedstat", (int)pid);
        FILE *stat = fopen(path, "r");
        unsigned long long on_cpu = 0, waiting = 0;
        if (!stat || fscanf(stat, "%llu %llu", &on_cpu, &waiting) != 2) return 1;
        fclose(stat);
        runnable_ms += (on_cpu + waiting) / 1e6;
        int status;
        struct rusage usage;
        if (wait4(pid, &status, 0, &usage) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
            return 1;
        cpu_ms_total += usage.ru_utime.tv_sec * 1e3 + usage.ru_utime.tv_usec / 1e3 +
                        usage.ru_stime.tv_sec * 1e3 + usage.ru_stime.tv_usec / 1e3;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[4]);
    FILE *out = fopen(tmp, "w");
    if (!out) return 1;
    fprintf(out, "{\"children\": %d, \"children_ms\": %.3f, \"cpu_ms\": %.3f}\n", children,
            runnable_ms, cpu_ms_total);
    if (fclose(out) != 0 || rename(tmp, argv[4]) != 0) return 1;
    return 0;
}
