/* cuda_naive.h — the textbook attention on the GPU, once for every stage that offers it as its
 * `naive` variant (06, 07, 08, 10) and for stage 09's naive MLA: cuBLAS strided-batched GEMMs with
 * the whole T x T score matrix in HBM, the mask of attn_mask.h applied to P element by element (no
 * work skipped), GQA by packing each kv head's G query heads into one matrix of R = G Tq rows,
 * learned sinks in the softmax denominator and dsinks in the backward. It is the baseline the
 * lessons are measured against, not a lesson itself: a stage registers these three functions in its
 * StageImpl (features as the stage declares them) and the diff between stages does not show them.
 * docs/hbm_model.md gives its counts. */
#ifndef FLASHLAB_CUDA_NAIVE_H
#define FLASHLAB_CUDA_NAIVE_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Forward: S (B, Hkv, R, Tk), P in place. Backward: P and dP, and D (B, Hq, Tq) with learned sinks. */
size_t cuda_naive_workspace_bytes(const AttnProblem *p, const RunCtx *ctx, Direction dir);
/* S = scale Q K^T, the masked softmax in place (lse with the sink logit), O = P V. */
int cuda_naive_forward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err);
/* P = exp(S - lse), dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(P dP)), dQ = scale dS K,
 * dK = scale dS^T Q, and dsinks[h] = -sum P_sink D with learned sinks. */
int cuda_naive_backward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err);

#ifdef __cplusplus
}
#endif
#endif
