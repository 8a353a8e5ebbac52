/* kind_mla.h — what the MLA kind (kind_mla.c) shows of a loaded MLA case, for tests and tools that
 * look inside one. */
#ifndef FLASHLAB_KIND_MLA_H
#define FLASHLAB_KIND_MLA_H

#include "kind.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The problem of an MLA case (sizes, options, pointers into its inputs), or NULL for another kind. */
const MlaProblem *mla_case_problem(const Case *c);
/* Input id (MlaInput) of an MLA case, or NULL. */
const Tensor *mla_case_input(const Case *c, int id);

#ifdef __cplusplus
}
#endif
#endif
