/* kind_mla.h — the MLA kind (kind_mla.c): its CaseKind, for the table of kinds (kind.c), and what it
 * shows of a loaded MLA case, for tests and tools that look inside one. */
#ifndef FLASHLAB_KIND_MLA_H
#define FLASHLAB_KIND_MLA_H

#include "kind.h"
#include "kind_mla_stage.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const CaseKind kind_mla;

/* The problem of an MLA case (sizes, options, pointers into its inputs), or NULL for another kind. */
const MlaProblem *mla_case_problem(const Case *c);
/* Input id (MlaInput) of an MLA case, or NULL. */
const Tensor *mla_case_input(const Case *c, int id);

/* One MLA step of impl on p into y (B, Tq, D), host memory, allocated by the caller; stats->fwd
 * gets the counts and extra_bytes_fwd the workspace (through runner_run_step, CPU or GPU). */
int mla_run(const StageImpl *impl, const MlaProblem *p, float *y, const RunCtx *ctx, RunStats *stats,
            FlError *err);
/* Median ms of timed MLA steps (runner.h Timing), counting off. */
int mla_time(const StageImpl *impl, const MlaProblem *p, const RunCtx *ctx, const Timing *timing, double *ms,
             FlError *err);

#ifdef __cplusplus
}
#endif
#endif
