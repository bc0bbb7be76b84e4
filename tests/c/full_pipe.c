/* full_pipe.c: a producer whose writes block on a full pipe: a child process (not profiled)
 * reads the pipe slowly. Between writes the producer works for 4 ms inside its own `produce`
 * mark (through fsprof.h). Its blocked writes are the agent's `output`, outside its marks: time
 * spent waiting for the reader, not work. The truth's total is the producer's life less the time
 * write() kept it blocked (the call's wall time less its CPU time).
 *
 * A write woken by the reader may then wait for a CPU (beside a busy process, 80 us a wake-up,
 * 120 ms of a 3 s run): running time to fsprof, which counts a woken thread as running, and
 * blocked time in this truth, whose clocks cannot tell that wait apart: schedstat's total of a
 * thread's waits for a CPU also grows while a thread that blocked stays queued (EEVDF's delayed
 * dequeue). So the truth gives it as a bound: extra.woken_wait_ms, the growth of that total
 * inside the writes, at least the waits after their wake-ups (with their waits when preempted).
 *
 *   full_pipe SECONDS [--truth FILE]
 *
 * A write's time on its CPU is its CPU time scaled for steal (see on_cpu.h): what a hypervisor
 * took from the CPU while the write ran is running time to fsprof, shared over the thread's
 * samples, and was blocked time in this truth (its wall time less its CPU time).
 *
 * Writes the truth in the format of tests/src/lib.rs (`Truth::to_json`), with the time write()
 * kept it blocked as extra.blocked_ms and that bound as extra.woken_wait_ms. */
#include "clock.h"
#include "on_cpu.h"
#include "fsprof.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: full_pipe SECONDS [--truth FILE]\n");
        return 2;
    }
    double seconds = atof(argv[1]);
    const char *truth_path = argc >= 4 && strcmp(argv[2], "--truth") == 0 ? argv[3] : NULL;
    const fsprof_feature *produce = fsprof_feature_new("produce");
    int fds[2];
    if (pipe(fds) != 0) {
        perror("pipe");
        return 1;
    }
    pid_t child = fork();
    if (child == 0) {
        close(fds[1]);
        static char sink[16384];
        while (read(fds[0], sink, sizeof sink) > 0) usleep(2000); /* a slow reader */
        _exit(0);
    }
    close(fds[0]);
    static char chunk[65536];
    memset(chunk, 'x', sizeof chunk);
    int counter = on_cpu_counter();
    double born = now_ms(), end = born + seconds * 1000, writes_ms = 0, writes_cpu_ms = 0,
           produce_ms = 0, woken_wait_ms = 0, cpu_born = cpu_ms(), on_cpu = on_cpu_ms(counter);
    while (now_ms() < end) {
        double t0 = now_ms();
        fsprof_mark(produce, "chunk");
        spin_us(4000);
        fsprof_unmark();
        double t1 = now_ms(), c1 = cpu_ms(), r1 = runnable_ms();
        produce_ms += t1 - t0;
        if (write(fds[1], chunk, sizeof chunk) != (ssize_t)sizeof chunk) {
            perror("write");
            return 1;
        }
        double cpu = cpu_ms() - c1;
        writes_ms += now_ms() - t1;
        writes_cpu_ms += cpu;
        woken_wait_ms += (runnable_ms() - r1) - cpu;
    }
    double scale = steal_scale(counter, on_cpu, cpu_ms() - cpu_born);
    double blocked_ms = writes_ms - writes_cpu_ms * scale;
    double total = now_ms() - born - blocked_ms;
    close(fds[1]);
    int status = 0;
    waitpid(child, &status, 0);
    if (truth_path) {
        FILE *f = fopen(truth_path, "w");
        if (!f) {
            perror(truth_path);
            return 1;
        }
        fprintf(f,
                "{\"total_ms\": %f, \"extra\": {\"blocked_ms\": %f, \"woken_wait_ms\": %f}, "
                "\"features\": {\"produce\": "
                "{\"ms\": %f, \"instances\": {\"chunk\": %f}}}}\n",
                total, blocked_ms, woken_wait_ms, produce_ms, produce_ms);
        fclose(f);
    }
    return 0;
}
