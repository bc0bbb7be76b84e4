/* short_children.c: a parent that runs short-lived children one after the other, as a build
 * runs its compilers, for the end-to-end test of following a process tree. Each child is this
 * program run again (fork, then exec of /proc/self/exe) to burn MS milliseconds of its own CPU
 * time and exit; the parent waits for each and adds up their CPU time (user and system, from
 * wait4's rusage: the kernel's count, exec included), then writes the ground truth as JSON:
 *
 *   short_children CHILDREN MS --truth FILE
 *
 * {"children": N, "children_ms": T}
 *
 * The parent itself only waits: a profiler whose ticks slow down while its threads are blocked
 * must still find each child and count its whole life. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>

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
    double total_ms = 0;
    for (int i = 0; i < children; i++) {
        pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) {
            execl("/proc/self/exe", "short_children", "burn", argv[2], (char *)NULL);
            _exit(127);
        }
        int status;
        struct rusage usage;
        if (wait4(pid, &status, 0, &usage) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
            return 1;
        total_ms += usage.ru_utime.tv_sec * 1e3 + usage.ru_utime.tv_usec / 1e3 +
                    usage.ru_stime.tv_sec * 1e3 + usage.ru_stime.tv_usec / 1e3;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[4]);
    FILE *out = fopen(tmp, "w");
    if (!out) return 1;
    fprintf(out, "{\"children\": %d, \"children_ms\": %.3f}\n", children, total_ms);
    if (fclose(out) != 0 || rename(tmp, argv[4]) != 0) return 1;
    return 0;
}
