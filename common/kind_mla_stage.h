/* kind_mla_stage.h — what a stage of the MLA case kind implements (stage 09; docs/conventions.md
 * "MLA cases"): the problem it is handed, its input files and shapes, and the entry points that
 * the MLA kind (kind_mla.c) calls through StageImpl.kind_entry. Included by stage 09's C and CUDA
 * sources, so it holds no host-only type. */
#ifndef FLASHLAB_KIND_MLA_STAGE_H
#define FLASHLAB_KIND_MLA_STAGE_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Multi-head latent attention (stage 09; docs/conventions.md "MLA cases"), one decoding or prefill
 * step of a DeepSeek-V2-style layer, float32, row-major:
 *   x    (B, Tq, D)   hidden states of the Tq new tokens
 *   ckv  (B, Tk, m)   latent KV cache, the new tokens' entries at the last Tq positions
 *   kpe  (B, Tk, p)   the RoPE part of the keys, shared by all heads, already rotated
 *   w_dq (D, mq)  w_uq (mq, H, dh)  w_qr (mq, H, p)  w_uk (m, H, dh)  w_uv (m, H, dv)  w_o (H, dv, D)
 *   y    (B, Tq, D)   the output
 * Query row i sits at position Tk - Tq + i (RoPE angle and bottom-right causal mask); the softmax
 * scale is 1 / sqrt(dh + p). Tq <= Tk. */
typedef enum { MLA_X, MLA_CKV, MLA_KPE, MLA_W_DQ, MLA_W_UQ, MLA_W_QR, MLA_W_UK, MLA_W_UV, MLA_W_O,
               MLA_INPUT_COUNT } MlaInput;

typedef struct {
    int B, Tq, Tk, D, mq, H, dh, m, p, dv;
    int causal;
    float rope_theta, scale;
    const float *in[MLA_INPUT_COUNT];        /* indexed by MlaInput */
    const uint16_t *in_bf16[MLA_INPUT_COUNT]; /* their bf16 copies for a bf16 CUDA stage (stage 17),
                                                 made by the runner (runner.h StepInputs); else NULL */
} MlaProblem;

/* File name ("ckv.npy") and shape of an input, or of the output y (id == MLA_INPUT_COUNT). */
const char *mla_file_name(int id);
int mla_shape(const MlaProblem *p, int id, int64_t shape[4]);
size_t mla_numel(const MlaProblem *p, int id);

/* Writes y (B, Tq, D); for a CUDA implementation every pointer is device memory. */
typedef int (*MlaFn)(const MlaProblem *p, float *y, RunCtx *ctx, FlError *err);
typedef size_t (*MlaWorkspaceFn)(const MlaProblem *p, const RunCtx *ctx);

/* StageImpl.kind_entry of a stage 09 implementation: its step and its scratch size. */
typedef struct {
    const char *kind; /* "mla": the kind's name, first (KindEntry, attn.h) */
    MlaFn forward;
    MlaWorkspaceFn workspace_bytes; /* NULL = no scratch */
} MlaEntry;

#ifdef __cplusplus
}
#endif
#endif
