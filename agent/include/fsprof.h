/* fsprof: feature marks for C and C++ (link with -lfsprof_agent). See agent/src/lib.rs. */
#ifndef FSPROF_H
#define FSPROF_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fsprof_feature fsprof_feature;
const fsprof_feature *fsprof_feature_new(const char *name);        /* interned: same name, same pointer */
void fsprof_mark(const fsprof_feature *feature, const char *payload); /* payload outlives the mark; NULL = the caller's call site */
void fsprof_antimark(const fsprof_feature *feature);
void fsprof_unmark(void);                                           /* pops the innermost mark or antimark */

/* Structured marks, popped by fsprof_unmark; every string outlives the mark (string literals).
 * An alternative a parser tries: the choice point, which branch (0 the first), the input offset. */
void fsprof_mark_alternative(const fsprof_feature *feature, const char *choice, unsigned branch,
                             unsigned long long offset);
/* A check at a boundary between two components: what is checked, the calling and called side. */
void fsprof_mark_boundary(const fsprof_feature *feature, const char *value, const char *from,
                          const char *to);

#ifdef __cplusplus
}
#endif

#endif /* FSPROF_H */
