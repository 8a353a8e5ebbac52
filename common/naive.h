/* naive.h — the textbook attention, once for every stage that offers it as its `naive` variant
 * (06, 07, 08, 10; stage 09's naive MLA uses the GPU forward). It is the baseline the lessons are
 * measured against, not a lesson itself: a stage registers these functions in its StageImpl
 * (features as the stage declares them), so the diff between stages does not show them.
 * docs/hbm_model.md gives their counts. Both devices compute the same thing:
 *   - the whole score matrix S = scale Q K^T and, in the backward, P and dP, materialised in HBM;
 *   - GQA by packing each kv head's G = Hq / Hkv query heads into one matrix of R = G Tq rows
 *     (with Hq == Hkv a kv head is a query head), one GEMM per kv head;
 *   - the mask of attn_mask.h applied to P element by element (no work skipped);
 *   - learned sinks in the softmax denominator, and dsinks[h] = -sum P_sink D in the backward, with
 *     D = rowsum(P ∘ dP) kept in the workspace only then.
 *
 * CPU (cpu_naive.c, OpenBLAS): the backward only. Its variant's forward is the stage's own FA2
 * forward, which saves the lse the backward starts from.
 * GPU (cuda_naive.cu, cuBLAS strided-batched GEMMs): forward and backward. */
#ifndef FLASHLAB_NAIVE_H
#define FLASHLAB_NAIVE_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CPU. Backward: P and dP (B, Hkv, R, Tk) each, and D (B, Hq, Tq) with learned sinks. Forward:
 * none (the stage's FA2 forward keeps its tiles in its SRAM arenas). */
size_t cpu_naive_workspace_bytes(const AttnProblem *p, const RunCtx *ctx, Direction dir);
/* P = exp(S - lse) (0 where masked), dV = P^T dO, dP = dO V^T, dS = P ∘ (dP - rowsum(P ∘ dP)),
 * dQ = scale dS K, dK = scale dS^T Q, and dsinks with learned sinks. */
int cpu_naive_backward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err);

/* GPU. Forward: S (B, Hkv, R, Tk), P in place. Backward: P and dP, and D (B, Hq, Tq) with learned
 * sinks. */
size_t cuda_naive_workspace_bytes(const AttnProblem *p, const RunCtx *ctx, Direction dir);
/* S = scale Q K^T, the masked softmax in place (lse with the sink logit), O = P V. */
int cuda_naive_forward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err);
/* The backward above, on the GPU. */
int cuda_naive_backward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err);

#ifdef __cplusplus
}
#endif
#endif
