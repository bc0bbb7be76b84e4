/* A process that makes itself not dumpable (as gpg-agent and ssh-agent do, to keep their
 * secrets from other processes of the same user), then says so and waits.
 *
 * undumpable SECONDS READY_FILE: READY_FILE is created once the process is not dumpable. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: undumpable SECONDS READY_FILE\n");
        return 2;
    }
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
        perror("prctl");
        return 1;
    }
    FILE *ready = fopen(argv[2], "w");
    if (!ready) {
        perror(argv[2]);
        return 1;
    }
    fclose(ready);
    sleep((unsigned)atoi(argv[1]));
    return 0;
}
