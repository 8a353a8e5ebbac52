/* cpu_naive.c — the CPU textbook backward shared by the stages' `naive` variants (naive.h).
 *
 * N = B Hkv kv heads, each read by G = Hq / Hkv query heads. A group's query heads are adjacent in
 * q (B, Hq, Tq, d), so its rows form one (R, d) matrix of R = G Tq packed rows, and every product
 * is one GEMM per kv head: dV = P^T dO and dK = dS^T Q then sum over the group inside the GEMM.
 * With Hq == Hkv (stages 06, 07) a kv head is a query head and R = Tq. The GEMMs run on
 * ctx->threads BLAS threads, the row passes on as many OpenMP threads. Each pass is counted where
 * it happens, as one read of its operands and one write of its result (stage 01's rule), so the
 * whole (R, Tk) score matrix of every kv head is paid for whatever the mask keeps. */
#include <cblas.h>
#include <math.h>
#include <stdint.h>

#include "attn_mask.h"
#include "naive.h"
#include "hbm.h"
#include "parallel.h"

/* The problem as the GEMMs see it: N kv heads of R packed rows and Tk keys, TT = R Tk scores. */
typedef struct {
    size_t N, R, Tk, d, dv, TT;
} Packed;

static Packed packed_of(const AttnProblem *p)
{
    Packed g = {(size_t)p->B * p->Hkv, (size_t)(p->Hq / p->Hkv) * p->Tq, (size_t)p->Tk,
                (size_t)p->d, (size_t)p->dv, 0};
    g.TT = g.R * g.Tk;
    return g;
}

static uint64_t float_bytes(size_t n) { return (uint64_t)n * sizeof(float); }

/* One pass over whole tensors: `read` floats in, `written` floats out. */
static void count_pass(HbmCounter *hbm, size_t read, size_t written)
{
    hbm_count_read(hbm, float_bytes(read));
    hbm_count_write(hbm, float_bytes(written));
}

size_t cpu_naive_workspace_bytes(const AttnProblem *p, const RunCtx *ctx, Direction dir)
{
    (void)ctx;
    const size_t rows = (size_t)p->B * p->Hq * p->Tq;
    if (dir != DIR_BWD)
        return 0;
    return (2 * rows * p->Tk + (p->sinks ? rows : 0)) * sizeof(float); /* P, dP (dS); D: dsinks */
}

/* One row-major matrix per kv head: kv head g's starts at ptr + g * stride, leading dimension ld,
 * taken transposed when trans is set. */
typedef struct {
    const float *ptr;
    size_t ld, stride;
    int trans;
} PerHead;

/* C_g = alpha op(A_g) op(B_g)   (m, n), inner dimension k, for each of the N kv heads: the CPU form
 * of a strided-batched GEMM. The C_g are packed (m, n) matrices, one after the other. */
static void gemm_per_head(size_t N, size_t m, size_t n, size_t k, float alpha, PerHead A, PerHead B,
                          float *C)
{
    for (size_t g = 0; g < N; g++)
        cblas_sgemm(CblasRowMajor, A.trans ? CblasTrans : CblasNoTrans,
                    B.trans ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha,
                    A.ptr + g * A.stride, (int)A.ld, B.ptr + g * B.stride, (int)B.ld, 0.0f,
                    C + g * m * n, (int)n);
}

/* P = exp(S - lse) in place over one row of Tk scores for the keys the row keeps, 0 for the others
 * (the whole row was computed: the mask saves no work here). A row that keeps no key has
 * lse = -inf (without learned sinks); its shift is then -inf as well, so P = exp(-inf) = 0, never
 * exp(+inf) or NaN, and its gradients are 0. */
static void probs_row(float *s, size_t Tk, float lse, AttnRowKeys keys)
{
    const float shift = lse == -INFINITY ? -INFINITY : -lse;
    for (size_t j = 0; j < Tk; j++)
        s[j] = attn_row_keeps(keys, (int)j) ? expf(s[j] + shift) : 0.0f;
}

/* rowsum(P ∘ dP) of one row over the keys it keeps, in key order, accumulated in double: the
 * masked P are 0, but a masked dP may be NaN. */
static float kept_dot(const float *P, const float *dP, size_t Tk, AttnRowKeys keys)
{
    double acc = 0.0;
    for (size_t j = 0; j < Tk; j++)
        if (attn_row_keeps(keys, (int)j))
            acc += (double)P[j] * dP[j];
    return (float)acc;
}

/* Pass 2 over every packed row: S (N, R, Tk) becomes P, from the forward's lse (N, R). */
static void probs_pass(const Packed *g, AttnMask mask, const float *lse, float *P, int threads)
{
    const long rows = (long)(g->N * g->R);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long row = 0; row < rows; row++)
        probs_row(P + (size_t)row * g->Tk, g->Tk, lse[row],
                  attn_row_keys(mask, (int)((size_t)row % g->R)));
}

/* Pass 5 over every packed row: dS = P ∘ (dP - rowsum(P ∘ dP)) in place over dP, and the rowsum
 * into D (N, R) when D is not NULL (learned sinks need it for dsinks). */
static void ds_pass(const Packed *g, AttnMask mask, const float *P, float *dP, float *D,
                    int threads)
{
    const long rows = (long)(g->N * g->R);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long row = 0; row < rows; row++) {
        const float *Pr = P + (size_t)row * g->Tk;
        float *dSr = dP + (size_t)row * g->Tk;
        const AttnRowKeys keys = attn_row_keys(mask, (int)((size_t)row % g->R));
        const float rowsum = kept_dot(Pr, dSr, g->Tk, keys);
        for (size_t j = 0; j < g->Tk; j++)
            dSr[j] = Pr[j] * (dSr[j] - rowsum);
        if (D)
            D[row] = rowsum;
    }
}

/* dsinks[h] = -sum over (b, i) of exp(s_h - lse_bhi) D_bhi, from the saved lse and D (B, Hq, Tq),
 * accumulated in double: one more pass after the seven, over lse and D. */
static void sink_gradient(const AttnProblem *p, const float *lse, const float *D, float *dsinks,
                          HbmCounter *hbm)
{
    const size_t rows = (size_t)p->Tq;
    for (int h = 0; h < p->Hq; h++) {
        double acc = 0.0;
        for (int b = 0; b < p->B; b++) {
            const size_t bh = (size_t)b * p->Hq + (size_t)h;
            for (size_t i = 0; i < rows; i++) /* with sinks lse >= s_h is finite */
                acc += exp((double)p->sinks[h] - lse[bh * rows + i]) * D[bh * rows + i];
        }
        dsinks[h] = (float)-acc;
    }
    /* lse, D, s in; dsinks out */
    count_pass(hbm, (size_t)p->B * p->Hq * rows * 2 + (size_t)p->Hq, (size_t)p->Hq);
}

/* Seven passes over whole tensors (the GEMMs over all N kv heads at once), then dsinks. */
int cpu_naive_backward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    (void)err;
    const Packed g = packed_of(p);
    const size_t N = g.N, R = g.R, Tk = g.Tk, d = g.d, dv = g.dv, TT = g.TT;
    const int threads = ctx->threads > 0 ? ctx->threads : 1;
    const AttnMask mask = attn_mask_make(p->causal, p->Tq, p->Tk, p->window, p->sink_tokens);
    HbmCounter *hbm = ctx->hbm;
    float *P = ctx->workspace;                     /* S, then P   (B, Hkv, R, Tk) */
    float *dP = P + N * TT;                        /* dP, then dS (B, Hkv, R, Tk) */
    float *D = p->sinks ? dP + N * TT : NULL;      /* rowsum(P ∘ dP) (B, Hq, Tq), for dsinks */
    const PerHead Q = {p->q, d, R * d, 0}, Kt = {p->k, d, Tk * d, 1}, K = {p->k, d, Tk * d, 0},
                  Vt = {p->v, dv, Tk * dv, 1}, dO = {p->dout, dv, R * dv, 0},
                  Pt = {P, Tk, TT, 1}, dS = {dP, Tk, TT, 0}, dSt = {dP, Tk, TT, 1};

    blas_threads_push(threads);
    // Pass 1: S = scale Q K^T   (R, Tk) per kv head
    gemm_per_head(N, R, Tk, d, p->scale, Q, Kt, P);
    count_pass(hbm, N * (R * d + Tk * d), N * TT);              /* Q, K; S */
    // Pass 2: P = exp(S - lse) row by row, in place, 0 for the keys a row does not keep
    probs_pass(&g, mask, t->lse, P, threads);
    count_pass(hbm, N * (TT + R), N * TT);                      /* S, lse; P */
    // Pass 3: dV = P^T dO   (Tk, dv) per kv head, summed over its group
    gemm_per_head(N, Tk, dv, R, 1.0f, Pt, dO, t->dv);
    count_pass(hbm, N * (TT + R * dv), N * Tk * dv);            /* P, dO; dV */
    // Pass 4: dP = dO V^T   (R, Tk) per kv head
    gemm_per_head(N, R, Tk, dv, 1.0f, dO, Vt, dP);
    count_pass(hbm, N * (R * dv + Tk * dv), N * TT);            /* dO, V; dP */
    // Pass 5: dS = P ∘ (dP - rowsum(P ∘ dP)) row by row, in place over dP (and D with sinks)
    ds_pass(&g, mask, P, dP, D, threads);
    count_pass(hbm, N * 2 * TT, N * TT + (D ? N * R : 0));      /* P, dP; dS, D */
    // Pass 6: dQ = scale dS K   (R, d) per kv head
    gemm_per_head(N, R, d, Tk, p->scale, dS, K, t->dq);
    count_pass(hbm, N * (TT + Tk * d), N * R * d);              /* dS, K; dQ */
    // Pass 7: dK = scale dS^T Q   (Tk, d) per kv head, summed over its group
    gemm_per_head(N, Tk, d, R, p->scale, dSt, Q, t->dk);
    count_pass(hbm, N * (TT + R * d), N * Tk * d);              /* dS, Q; dK */
    blas_threads_pop();

    if (D)
        sink_gradient(p, t->lse, D, t->dsinks, hbm);
    return FL_OK;
}
