/* libleaf.c: the shared library half of the native-stack target chain.c. `leaf_work` marks the
 * feature "leaf" (instance "leaf") through the C ABI and spins in a volatile loop, calling
 * nothing while marked, so a sample inside the mark has leaf_work, in libleaf.so, as its innermost
 * frame and the mark placed right below it. Built with
 * `gcc -O2 -g -fomit-frame-pointer -fPIC -shared`. It does no timing (chain.c does). */
#include "fsprof.h"

__attribute__((noipa)) unsigned long leaf_work(unsigned long iterations) {
    static const fsprof_feature *leaf; /* interned: a racing first call gets the same pointer */
    if (!leaf) leaf = fsprof_feature_new("leaf");
    fsprof_mark(leaf, "leaf");
    volatile unsigned long x = 1;
    for (unsigned long i = 0; i < iterations; i++) x = x * 6364136223846793005UL + 1;
    fsprof_unmark();
    return x;
}
