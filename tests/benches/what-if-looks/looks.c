/* What one look of `fsprof what-if` costs a thread on this machine, without fsprof: a fixed
 * loop of arithmetic timed alone (mode 0) and with what the agent arms per thread, every PERIOD
 * ns of the thread's CPU time: a perf task-clock event sending SIGPROF to a handler that reads
 * the thread's CPU clock (1: the agent's timer), the same event with no signal (3: the timer's
 * interrupts alone), and a POSIX timer on the monotonic clock sending the signal (4: signals
 * without perf). Prints the looks taken and the loop's wall and CPU time.
 *
 *   looks PERIOD_NS MODE */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile long looks;

static void on_look(int signal) {
    struct timespec t;
    (void)signal;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    looks++;
}

static double seconds(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void signal_every(clockid_t clock, long period) {
    struct sigevent event;
    memset(&event, 0, sizeof event);
    event.sigev_notify = SIGEV_THREAD_ID;
    event.sigev_signo = SIGPROF;
    event._sigev_un._tid = gettid();
    timer_t timer;
    struct itimerspec every = {{0, period}, {0, period}};
    if (timer_create(clock, &event, &timer) || timer_settime(timer, 0, &every, NULL)) {
        perror("timer");
        exit(1);
    }
}

static void task_clock(long period, int with_signal) {
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.type = PERF_TYPE_SOFTWARE;
    attr.size = sizeof attr;
    attr.config = PERF_COUNT_SW_TASK_CLOCK;
    attr.sample_period = period;
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    attr.wakeup_events = 1;
    int fd = syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) {
        perror("perf_event_open");
        exit(1);
    }
    if (with_signal) {
        struct f_owner_ex owner = {F_OWNER_TID, gettid()};
        fcntl(fd, F_SETSIG, SIGPROF);
        fcntl(fd, F_SETOWN_EX, &owner);
        fcntl(fd, F_SETFL, O_ASYNC);
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: looks PERIOD_NS MODE (0 none, 1 task-clock + signal, 3 task-clock, 4 monotonic timer + signal)\n");
        return 2;
    }
    long period = atol(argv[1]);
    int mode = atoi(argv[2]);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_look;
    action.sa_flags = SA_RESTART;
    sigaction(SIGPROF, &action, NULL);
    if (mode == 1 || mode == 3)
        task_clock(period, mode == 1);
    else if (mode == 4)
        signal_every(CLOCK_MONOTONIC, period);
    double wall = seconds(CLOCK_MONOTONIC), cpu = seconds(CLOCK_THREAD_CPUTIME_ID);
    volatile unsigned long x = 1;
    for (long i = 0; i < 400000000; i++)
        x = x * 6364136223846793005UL + 1;
    printf("mode %d looks %ld wall %.4f cpu %.4f\n", mode, looks,
           seconds(CLOCK_MONOTONIC) - wall, seconds(CLOCK_THREAD_CPUTIME_ID) - cpu);
    return 0;
}
