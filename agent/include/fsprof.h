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

#ifdef __cplusplus
}
#endif

#endif /* FSPROF_H */
