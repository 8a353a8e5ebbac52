/* cuda_naive.cu — the cuBLAS naive attention shared by the stages' `naive` variants (naive.h).
 *
 * One batched GEMM entry per kv head over its R = G Tq packed rows: the G query heads of a kv head
 * are adjacent in q (B, Hq, Tq, d), so they form one (R, d) matrix, and dV = P^T dO and
 * dK = dS^T Q then sum over the group inside the GEMM. The GEMMs are counted from the host as one
 * pass over their operands and result (the ideal a GEMM can reach); the row kernels count their
 * own accesses. Only the scores a row keeps are read by the softmax and the probabilities kernel. */
#include <math.h>

#include "attn_mask.h"
#include "cuda_blas.h"
#include "naive.h"
#include "cuda_tiles.cuh"
#include "cuda_util.h"

size_t cuda_naive_workspace_bytes(const AttnProblem *p, const RunCtx *ctx, Direction dir)
{
    (void)ctx;
    const size_t rows = (size_t)p->B * p->Hq * p->Tq;
    if (dir != DIR_BWD)
        return rows * p->Tk * sizeof(float);                      // S, then P
    return (2 * rows * p->Tk + (p->sinks ? rows : 0)) * sizeof(float); // P, dP (dS), D for dsinks
}

// P = softmax(S) over the keys packed row i sees, in place, 0 elsewhere; lse = log of the whole
// denominator, sink logit included. One block per row; a row that sees no key gets P = 0 and
// lse = -inf (or its sink logit). The visible part of S is read three times.
static __global__ void naive_softmax_kernel(float *S, float *lse, int R, int Tk, AttnMask mask,
                                            const float *sinks, int Hq, unsigned long long *hbm)
{
    __shared__ float scratch[32];
    const size_t row = blockIdx.x;
    const AttnRowKeys keys = attn_row_keys(mask, (int)(row % R));
    const float sink = sinks ? sinks[row / mask.Tq % Hq] : -INFINITY;
    float *s = S + row * Tk;
    float mx = sink, sum = 0.0f;
    for (int j = threadIdx.x; j < Tk; j += blockDim.x)
        if (attn_row_keeps(keys, j))
            mx = fmaxf(mx, s[j]);
    mx = block_max(mx, scratch);
    const float ref = mx == -INFINITY ? 0.0f : mx; // no key and no sink: every term is 0
    for (int j = threadIdx.x; j < Tk; j += blockDim.x)
        if (attn_row_keeps(keys, j))
            sum += expf(s[j] - ref);
    sum = block_sum(sum, scratch) + expf(sink - ref); // the sink joins the denominator only
    const float inv = sum != 0.0f ? 1.0f / sum : 0.0f; // a NaN sum stays NaN (not "no key")
    for (int j = threadIdx.x; j < Tk; j += blockDim.x)
        s[j] = attn_row_keeps(keys, j) ? expf(s[j] - ref) * inv : 0.0f;
    if (threadIdx.x == 0) {
        lse[row] = sum != 0.0f ? ref + logf(sum) : -INFINITY;
        hbm_dev_add(hbm, HBM_READ, 3ull * attn_row_count(keys) * sizeof(float)); // S, 3 passes
        hbm_dev_add(hbm, HBM_WRITTEN, ((unsigned long long)Tk + 1) * sizeof(float)); // P, lse
    }
}

// The problem as the GEMMs see it: batch = B Hkv matrices, each of the R = G Tq packed rows of one
// kv head (TT = R Tk scores), and the cuBLAS handle.
typedef struct {
    cublasHandle_t handle;
    int batch, R, Tk, d, dv;
    long long TT, n;
} Packed;

static int packed_of(const AttnProblem *p, Packed *g, FlError *err)
{
    g->batch = p->B * p->Hkv, g->R = p->Hq / p->Hkv * p->Tq, g->Tk = p->Tk, g->d = p->d, g->dv = p->dv;
    g->TT = (long long)g->R * g->Tk, g->n = g->batch;
    return fl_cublas_handle(&g->handle, err);
}

// S = scale Q K^T (R, Tk) of every kv head into S, counted as one pass over Q, K and S.
static int scores(const AttnProblem *p, const Packed *g, float *S, unsigned long long *hbm, FlError *err)
{
    const RmOperand Q = {p->q, g->d, (long long)g->R * g->d, 0}, Kt = {p->k, g->d, (long long)g->Tk * g->d, 1};
    const unsigned long long f = sizeof(float);
    int rc = fl_gemm_rm(g->handle, g->R, g->Tk, g->d, p->scale, Q, Kt, 0.0f, S, g->Tk, g->TT, g->batch,
                        "S = Q K^T", err);
    if (rc == FL_OK)
        rc = hbm_dev_add_from_host(hbm, f * g->n * ((long long)g->R * g->d + (long long)g->Tk * g->d),
                                   f * g->n * g->TT, err);
    return rc;
}

// S = scale Q K^T (all of it), the masked softmax in place, O = P V.
int cuda_naive_forward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    Packed g;
    int rc = packed_of(p, &g, err);
    const int R = g.R, Tk = g.Tk, dv = g.dv;
    const long long TT = g.TT, n = g.n;
    float *S = (float *)ctx->workspace; // (B, Hkv, R, Tk)
    unsigned long long *hbm = ctx->hbm_dev;
    const RmOperand V = {p->v, dv, (long long)Tk * dv, 0}, P = {S, Tk, TT, 0};
    const unsigned long long f = sizeof(float);

    if (rc == FL_OK)
        rc = scores(p, &g, S, hbm, err);
    if (rc == FL_OK) {
        const AttnMask mask = attn_mask_make(p->causal, p->Tq, Tk, p->window, p->sink_tokens);
        naive_softmax_kernel<<<(unsigned)(n * R), 256>>>(S, t->lse, R, Tk, mask, p->sinks, p->Hq,
                                                           hbm);
        rc = fl_cuda_launch_status("naive_softmax_kernel", err);
    }
    if (rc == FL_OK)
        rc = fl_gemm_rm(g.handle, R, dv, Tk, 1.0f, P, V, 0.0f, t->o, dv, (long long)R * dv, g.batch,
                        "O = P V", err);
    if (rc == FL_OK)
        rc = hbm_dev_add_from_host(hbm, f * n * (TT + (long long)Tk * dv), f * n * R * dv, err);
    return rc;
}

// P = exp(S - lse) in place over S (scale already applied by the GEMM) for the keys row i sees,
// 0 elsewhere; one block per row.
static __global__ void naive_probs_kernel(float *S, const float *lse, int R, int Tk, AttnMask mask,
                                          unsigned long long *hbm)
{
    const size_t row = blockIdx.x;
    const AttnRowKeys keys = attn_row_keys(mask, (int)(row % R));
    const float l = lse[row];
    for (int j = threadIdx.x; j < Tk; j += blockDim.x)
        S[row * Tk + j] = attn_row_keeps(keys, j) ? expf(S[row * Tk + j] - l) : 0.0f;
    if (threadIdx.x == 0) {
        hbm_dev_add(hbm, HBM_READ, (attn_row_count(keys) + 1ull) * sizeof(float)); // S, lse
        hbm_dev_add(hbm, HBM_WRITTEN, (unsigned long long)Tk * sizeof(float));      // P
    }
}

// dS = P ∘ (dP - rowsum(P ∘ dP)) in place over dP, and D = rowsum(P ∘ dP) where D is not NULL
// (learned sinks need it for dsinks); one block per row, two passes over the row.
static __global__ void naive_ds_kernel(const float *P, float *dP, float *D, int Tk,
                                       unsigned long long *hbm)
{
    __shared__ float scratch[32];
    const size_t row = blockIdx.x;
    const float *p = P + row * Tk;
    float *dp = dP + row * Tk;
    float acc = 0.0f;
    for (int j = threadIdx.x; j < Tk; j += blockDim.x)
        acc = fmaf(p[j], dp[j], acc);
    const float rowsum = block_sum(acc, scratch); // rowsum(P ∘ dP), the textbook form of D
    for (int j = threadIdx.x; j < Tk; j += blockDim.x)
        dp[j] = p[j] * (dp[j] - rowsum);
    if (threadIdx.x == 0) {
        if (D)
            D[row] = rowsum;
        hbm_dev_add(hbm, HBM_READ, 4ull * Tk * sizeof(float)); // P, dP, twice
        hbm_dev_add(hbm, HBM_WRITTEN, ((unsigned long long)Tk + (D ? 1 : 0)) * sizeof(float)); // dS, D
    }
}

// dsinks[h] = -sum over (b, i) of P_sink D, P_sink = exp(s_h - lse): one block per head, the
// threads' shares added by block_sum in a fixed order.
static __global__ void sink_gradient_kernel(const float *sinks, const float *lse, const float *D,
                                            float *dsinks, int B, int Hq, int Tq, unsigned long long *hbm)
{
    __shared__ float scratch[32];
    const int h = blockIdx.x;
    const float s = sinks[h];
    float acc = 0.0f;
    for (long long k = threadIdx.x; k < (long long)B * Tq; k += blockDim.x) {
        const size_t row = ((size_t)(k / Tq) * Hq + h) * Tq + (size_t)(k % Tq); // (b, h, i)
        acc = fmaf(expf(s - lse[row]), D[row], acc);
    }
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) {
        dsinks[h] = -acc;
        hbm_dev_add(hbm, HBM_READ, (2ull * B * Tq + 1) * sizeof(float)); // lse, D, s_h
        hbm_dev_add(hbm, HBM_WRITTEN, sizeof(float));
    }
}

int cuda_naive_backward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    Packed g;
    int rc = packed_of(p, &g, err);
    const int batch = g.batch, R = g.R, Tk = g.Tk, d = g.d, dv = g.dv;
    const long long TT = g.TT, n = g.n;
    cublasHandle_t handle = g.handle;
    float *P = (float *)ctx->workspace, *dP = P + n * TT; // (B, Hkv, R, Tk) each
    float *D = p->sinks ? dP + n * TT : NULL;             // (B, Hq, Tq), for dsinks
    unsigned long long *hbm = ctx->hbm_dev;
    const RmOperand Q = {p->q, d, (long long)R * d, 0}, K = {p->k, d, (long long)Tk * d, 0},
                    V = {p->v, dv, (long long)Tk * dv, 0}, dO = {p->dout, dv, (long long)R * dv, 0},
                    dSm = {dP, Tk, TT, 0};
    const RmOperand Vt = {V.ptr, V.ld, V.stride, 1},
                    Pt = {P, Tk, TT, 1}, dSt = {dP, Tk, TT, 1};
    const unsigned long long f = sizeof(float);

    // S = scale Q K^T   (R, Tk), then P = exp(S - lse) in place
    if (rc == FL_OK)
        rc = scores(p, &g, P, hbm, err);
    if (rc == FL_OK) {
        const AttnMask mask = attn_mask_make(p->causal, p->Tq, Tk, p->window, p->sink_tokens);
        naive_probs_kernel<<<(unsigned)(n * R), 256>>>(P, t->lse, R, Tk, mask, hbm);
        rc = fl_cuda_launch_status("naive_probs_kernel", err);
    }
    // dV = P^T dO   (Tk, dv)
    if (rc == FL_OK)
        rc = fl_gemm_rm(handle, Tk, dv, R, 1.0f, Pt, dO, 0.0f, t->dv, dv, (long long)Tk * dv, batch,
                        "dV = P^T dO", err);
    if (rc == FL_OK)
        rc = hbm_dev_add_from_host(hbm, f * n * (TT + (long long)R * dv), f * n * Tk * dv, err);
    // dP = dO V^T   (R, Tk)
    if (rc == FL_OK)
        rc = fl_gemm_rm(handle, R, Tk, dv, 1.0f, dO, Vt, 0.0f, dP, Tk, TT, batch, "dP = dO V^T", err);
    if (rc == FL_OK)
        rc = hbm_dev_add_from_host(hbm, f * n * ((long long)R * dv + (long long)Tk * dv), f * n * TT, err);
    // dS = P ∘ (dP - rowsum(P ∘ dP)), in place over dP
    if (rc == FL_OK) {
        naive_ds_kernel<<<(unsigned)(n * R), 256>>>(P, dP, D, Tk, hbm);
        rc = fl_cuda_launch_status("naive_ds_kernel", err);
    }
    // dQ = scale dS K   (R, d);   dK = scale dS^T Q   (Tk, d)
    if (rc == FL_OK)
        rc = fl_gemm_rm(handle, R, d, Tk, p->scale, dSm, K, 0.0f, t->dq, d, (long long)R * d, batch,
                        "dQ = dS K", err);
    if (rc == FL_OK)
        rc = fl_gemm_rm(handle, Tk, d, R, p->scale, dSt, Q, 0.0f, t->dk, d, (long long)Tk * d, batch,
                        "dK = dS^T Q", err);
    if (rc == FL_OK)
        rc = hbm_dev_add_from_host(hbm, f * n * (2 * TT + (long long)Tk * d + (long long)R * d),
                                   f * n * ((long long)R * d + (long long)Tk * d), err);
    if (rc == FL_OK && p->sinks) {
        sink_gradient_kernel<<<(unsigned)p->Hq, 256>>>(p->sinks, t->lse, D, t->dsinks, p->B, p->Hq, p->Tq,
                                                        hbm);
        rc = fl_cuda_launch_status("sink_gradient_kernel", err);
    }
    return rc;
}

