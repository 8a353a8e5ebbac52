/* cpu_naive.h — the textbook attention backward on the CPU, once for every stage that offers it as
 * its `naive` variant (06, 07, 08, 10): seven passes over whole tensors, with the score matrix P
 * and its gradient dP materialised in HBM, one OpenBLAS GEMM per kv head over its R = G Tq packed
 * query rows (GQA; with Hq == Hkv a kv head is a query head), the mask of attn_mask.h applied to P
 * element by element (no work skipped), and dsinks with learned sinks. The forward of such a
 * variant is the stage's own FA2 forward, which saves the lse this backward starts from. It is the
 * baseline the lessons are measured against, not a lesson itself: a stage registers these two
 * functions in its StageImpl (features as the stage declares them) and the diff between stages
 * does not show them. docs/hbm_model.md gives its counts; common/cuda_naive.h is the GPU twin. */
#ifndef FLASHLAB_CPU_NAIVE_H
#define FLASHLAB_CPU_NAIVE_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Backward: P and dP (B, Hkv, R, Tk) each, and D (B, Hq, Tq) with learned sinks. Forward: none
 * (the stage's FA2 forward keeps its tiles in its SRAM arenas). */
size_t cpu_naive_workspace_bytes(const AttnProblem *p, const RunCtx *ctx, Direction dir);
/* S = scale Q K^T, P = exp(S - lse) (0 where masked), dV = P^T dO, dP = dO V^T,
 * dS = P ∘ (dP - rowsum(P ∘ dP)), dQ = scale dS K, dK = scale dS^T Q, and
 * dsinks[h] = -sum P_sink D with learned sinks. */
int cpu_naive_backward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err);

#ifdef __cplusplus
}
#endif
#endif
