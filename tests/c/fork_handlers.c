/* fork_handlers.c: forks COUNT times, from the main thread and from a second thread at once; each
 * child allocates and writes (interposed calls the agent marks) and exits 0. The program is
 * linked with libfork_early.so, whose fork child handler allocates before the agent's handlers
 * run. Prints "ok" and exits 0 if every child exited 0; else prints how one ended and exits 1.
 *
 *   fork_handlers COUNT */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void fork_early_linked(void);

static int count;

static void *forker(void *arg) {
    (void)arg;
    for (int i = 0; i < count; i++) {
        pid_t pid = fork();
        if (pid < 0) return (void *)1;
        if (pid == 0) {
            char *p = malloc(100);
            if (!p) _exit(3);
            memset(p, 'x', 100);
            int fd = open("/dev/null", O_WRONLY);
            if (fd < 0 || write(fd, p, 100) != 100) _exit(4);
            free(p);
            _exit(0);
        }
        int status;
        if (waitpid(pid, &status, 0) != pid) return (void *)1;
        if (WIFSIGNALED(status)) {
            printf("child killed by signal %d\n", WTERMSIG(status));
            return (void *)1;
        }
        if (WEXITSTATUS(status) != 0) {
            printf("child exited %d\n", WEXITSTATUS(status));
            return (void *)1;
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fork_handlers COUNT\n");
        return 2;
    }
    count = atoi(argv[1]);
    fork_early_linked();
    pthread_t t;
    if (pthread_create(&t, NULL, forker, NULL) != 0) return 3;
    void *failed_here = forker(NULL);
    void *failed_there;
    pthread_join(t, &failed_there);
    if (failed_here || failed_there) return 1;
    puts("ok");
    return 0;
}
