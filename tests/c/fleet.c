/* fleet.c: marks through the agent's C ABI (fsprof.h) one step at a time, for the test that
 * reads, from outside, what the agent publishes for the fleet's profilers with
 * FSPROF_FLEET_LABELS=1 (tests/tests/fleet.rs).
 *
 * It prints `thread main TID THREAD_POINTER`, then, for each step, `step FEATURE<TAB>INSTANCE`
 * (`step -<TAB>-` where nothing counts) with what its thread is marked with, and waits for a
 * line on its standard input before the next. A call-site mark (a NULL payload) is not
 * published: the mark around it still shows. A mark's payload buffer reused for a later mark
 * (the same address, the same length) shows its new text. It exits at the end of its input. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fsprof.h"

static void step(const char *feature, const char *instance) {
    char line[64];
    printf("step %s\t%s\n", feature, instance);
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) exit(0);
}

int main(void) {
    const fsprof_feature *parsing = fsprof_feature_new("parsing");
    const fsprof_feature *output = fsprof_feature_new("output");
    const fsprof_feature *rule = fsprof_feature_new("rule");
    unsigned long pointer;
    __asm__ volatile("mov %%fs:0, %0" : "=r"(pointer));
    printf("thread main %ld %#lx\n", (long)syscall(SYS_gettid), pointer);

    step("-", "-");
    fsprof_mark(parsing, "GET /a");
    step("parsing", "GET /a");
    fsprof_mark(output, NULL);
    step("parsing", "GET /a");
    fsprof_unmark();
    fsprof_antimark(parsing);
    step("-", "-");
    fsprof_mark_alternative(rule, "item", 1, 40);
    step("rule", "item, branch 1");
    fsprof_unmark();
    fsprof_unmark();
    step("parsing", "GET /a");
    fsprof_unmark();
    char buffer[32];
    for (int i = 1; i <= 2; i++) {
        char expected[32];
        snprintf(buffer, sizeof buffer, "GET /%d", i);
        snprintf(expected, sizeof expected, "GET /%d", i);
        fsprof_mark(parsing, buffer);
        step("parsing", expected);
        fsprof_unmark();
    }
    step("-", "-");
    return 0;
}
