/* epoll_server.c: a server whose one thread waits in epoll_wait between requests, as every event
 * loop does, and handles each request for 8 ms inside its own `handling` mark (through
 * fsprof.h). A child process (not profiled) connects over loopback and sends a request every
 * 12 ms or so (4 ms after each answer). The server's waits are idle time: the truth's total is
 * its life less the time it spent blocked in epoll_wait (the call's wall time less its CPU time:
 * the kernel's work in the call, about 70 us of CPU a call, switching the thread out and in, is
 * running time; with the wall time left out whole, the truth read `handling` 0.5 points high).
 *
 * A wait woken by a request may then wait for a CPU (beside a busy process in a whole-suite run,
 * the report read handling 7 points below this truth once, before the truth bounded it; beside
 * one `yes` alone, the bound read 4 to 11 ms in 3 s): running time to fsprof,
 * which counts a woken thread as running, and idle time in this truth, whose clocks cannot tell
 * that wait apart. So the truth gives it as a bound, as `full_pipe.c` does: extra.woken_wait_ms,
 * the growth of the thread's time queued for a CPU inside epoll_wait (`runnable_ms`), at least
 * the waits after its wake-ups. extra.blocked_ms is the time epoll_wait kept it blocked.
 * A call's time on its CPU is its CPU time scaled for steal (see on_cpu.h), as `full_pipe.c`'s.
 *
 *   epoll_server SECONDS [--truth FILE]
 *
 * Writes the truth in the format of tests/src/lib.rs (`Truth::to_json`). */
#include "clock.h"
#include "fsprof.h"
#include "on_cpu.h"
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void client(unsigned short port, double seconds) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in at = {.sin_family = AF_INET, .sin_port = htons(port)};
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(s, (struct sockaddr *)&at, sizeof at) != 0) _exit(1);
    double end = now_ms() + seconds * 1000;
    char byte = 'r';
    while (now_ms() < end) {
        if (write(s, &byte, 1) != 1 || read(s, &byte, 1) != 1) _exit(1);
        usleep(4000);
    }
    _exit(0); /* closing the socket ends the server's loop */
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: epoll_server SECONDS [--truth FILE]\n");
        return 2;
    }
    double seconds = atof(argv[1]);
    const char *truth_path = argc >= 4 && strcmp(argv[2], "--truth") == 0 ? argv[3] : NULL;
    const fsprof_feature *handling = fsprof_feature_new("handling");
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in at = {.sin_family = AF_INET};
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof at;
    if (bind(listener, (struct sockaddr *)&at, sizeof at) != 0 || listen(listener, 1) != 0 ||
        getsockname(listener, (struct sockaddr *)&at, &len) != 0) {
        perror("listen");
        return 1;
    }
    double born = now_ms();
    pid_t child = fork();
    if (child == 0) client(ntohs(at.sin_port), seconds);

    int poller = epoll_create1(0);
    struct epoll_event event = {.events = EPOLLIN, .data.fd = listener};
    epoll_ctl(poller, EPOLL_CTL_ADD, listener, &event);
    int counter = on_cpu_counter();
    double cpu_born = cpu_ms(), on_cpu = on_cpu_ms(counter);
    double waits_ms = 0, waits_cpu_ms = 0, handling_ms = 0, woken_wait_ms = 0;
    int open = 1;
    while (open) {
        struct epoll_event ready;
        double t0 = now_ms(), c0 = cpu_ms(), r0 = runnable_ms();
        int n = epoll_wait(poller, &ready, 1, 10000);
        double wall = now_ms() - t0, cpu = cpu_ms() - c0;
        waits_ms += wall;
        waits_cpu_ms += cpu;
        woken_wait_ms += (runnable_ms() - r0) - cpu;
        if (n < 0 && errno == EINTR) continue; /* as event loops do (a ptrace stop causes one) */
        if (n != 1) break;
        if (ready.data.fd == listener) {
            int connection = accept(listener, NULL, NULL);
            struct epoll_event more = {.events = EPOLLIN, .data.fd = connection};
            epoll_ctl(poller, EPOLL_CTL_ADD, connection, &more);
            continue;
        }
        char byte;
        if (read(ready.data.fd, &byte, 1) != 1) {
            open = 0;
            break;
        }
        double t1 = now_ms();
        fsprof_mark(handling, "request");
        spin_us(8000);
        fsprof_unmark();
        handling_ms += now_ms() - t1;
        if (write(ready.data.fd, &byte, 1) != 1) break;
    }
    /* The wait for the client's exit is the program's too (the report counts the process's whole
     * life): blocked, less its CPU, as epoll_wait's (not in extra.blocked_ms, which the test
     * compares with `poll`'s waits); its wait for a CPU once woken bounded the
     * same way (a fresh-clone run read the server's `process` feature, its waitpid, at 71 ms
     * running, outside a truth that ended before it: handling 94.8% against 98.7-98.9%). */
    int status = 0;
    double t0 = now_ms(), c0 = cpu_ms(), r0 = runnable_ms();
    waitpid(child, &status, 0);
    double wall = now_ms() - t0, cpu = cpu_ms() - c0;
    woken_wait_ms += (runnable_ms() - r0) - cpu;
    double scale = steal_scale(counter, on_cpu, cpu_ms() - cpu_born);
    double blocked_ms = waits_ms - waits_cpu_ms * scale;
    double total = now_ms() - born - blocked_ms - (wall - cpu * scale);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "the client failed\n");
        return 1;
    }
    if (truth_path) {
        FILE *f = fopen(truth_path, "w");
        if (!f) {
            perror(truth_path);
            return 1;
        }
        fprintf(f,
                "{\"total_ms\": %f, \"extra\": {\"blocked_ms\": %f, \"woken_wait_ms\": %f}, "
                "\"features\": {\"handling\": "
                "{\"ms\": %f, \"instances\": {\"request\": %f}}}}\n",
                total, blocked_ms, woken_wait_ms, handling_ms, handling_ms);
        fclose(f);
    }
    return 0;
}
