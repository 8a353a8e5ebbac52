/* stages/01_naive/naive.c — standard attention, the way a framework runs it (CPU, OpenBLAS).
 *
 * One head: Q (Tq, d), K (Tk, d), V (Tk, dv). The whole score matrix of every head is
 * materialised in "HBM" (the workspace):
 *   S = Q K^T * scale        (Tq, Tk)
 *   P = softmax(S) by rows   (Tq, Tk)     lse = m + log l   (Tq)
 *   O = P V                  (Tq, dv)
 * Three passes over whole tensors, each counted where the code reads and writes them: the T x T
 * matrices S and P are written and read once each, so traffic and extra memory are Theta(T^2).
 * Supports plain forward attention (Hq == Hkv, no mask) of any size. */
#include <cblas.h>
#include <math.h>
#include <stddef.h>

#include "attn.h"
#include "hbm.h"
#include "parallel.h"

/* The slices of one head bh = b * Hq + h (Hq == Hkv until stage 08 adds GQA). */
typedef struct {
    const float *q, *k, *v; /* Q (Tq, d)   K (Tk, d)   V (Tk, dv) */
    float *o, *lse;         /* O (Tq, dv)  lse (Tq) */
} Head;

static Head head_slices(const AttnProblem *p, AttnTensors *t, size_t bh)
{
    const size_t Tq = p->Tq, Tk = p->Tk;
    Head x = {p->q + bh * Tq * p->d, p->k + bh * Tk * p->d, p->v + bh * Tk * p->dv,
              t->o + bh * Tq * p->dv, t->lse + bh * Tq};
    return x;
}

static uint64_t float_bytes(size_t n) { return (uint64_t)n * sizeof(float); }

/* Row softmax in place: s <- exp(s - m) / l with m = max(s), l = sum exp(s - m). Returns
 * lse = m + log l, the log of the softmax denominator. */
static float softmax_row(float *s, size_t n)
{
    /* exercise: begin — the row softmax and its lse (see above) (check 01: lse.npy of every case; o.npy once the two below are done) | stub: (void)s, (void)n; return 0.0f; */
    float m = -INFINITY;
    for (size_t j = 0; j < n; j++)
        m = fmaxf(m, s[j]);
    float l = 0.0f;
    for (size_t j = 0; j < n; j++) {
        s[j] = expf(s[j] - m);
        l += s[j];
    }
    const float inv_l = 1.0f / l;
    for (size_t j = 0; j < n; j++)
        s[j] *= inv_l;
    return m + logf(l);
    /* exercise: end */
}

/* S (then P) of every head: (B, Hq, Tq, Tk) floats. */
static size_t naive_workspace_bytes(const AttnProblem *p, const RunCtx *ctx, Direction dir)
{
    (void)ctx, (void)dir;
    return (size_t)p->B * p->Hq * p->Tq * p->Tk * sizeof(float);
}

static int naive_forward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    (void)err;
    const size_t heads = (size_t)p->B * p->Hq, Tq = p->Tq, Tk = p->Tk, d = p->d, dv = p->dv;
    const int threads = ctx->threads > 0 ? ctx->threads : 1;
    HbmCounter *hbm = ctx->hbm;
    float *S = ctx->workspace; /* S, then P, of every head   (B, Hq, Tq, Tk) */

    blas_threads_push(threads);

    // Pass 1: S = Q K^T * scale   (Tq, Tk) per head
    for (size_t bh = 0; bh < heads; bh++) {
        const Head x = head_slices(p, t, bh);
        /* exercise: begin — S = Q K^T * scale of head bh   (Tq, Tk) (check 01: o and lse of every case) | stub: (void)x; */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)Tq, (int)Tk, (int)d, p->scale,
                    x.q, (int)d, x.k, (int)d, 0.0f, S + bh * Tq * Tk, (int)Tk);
        /* exercise: end */
    }
    hbm_count_read(hbm, float_bytes(heads * Tq * d) + float_bytes(heads * Tk * d)); /* Q, K */
    hbm_count_write(hbm, float_bytes(heads * Tq * Tk));                            /* S */

    // Pass 2: P = softmax(S) row by row, in place over S; lse = m + log l   (Tq) per head
    const long rows = (long)(heads * Tq);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long row = 0; row < rows; row++)
        t->lse[row] = softmax_row(S + (size_t)row * Tk, Tk);
    hbm_count_read(hbm, float_bytes(heads * Tq * Tk));                       /* S */
    hbm_count_write(hbm, float_bytes(heads * Tq * Tk) + float_bytes(heads * Tq)); /* P, lse */

    // Pass 3: O = P V   (Tq, dv) per head
    for (size_t bh = 0; bh < heads; bh++) {
        const Head x = head_slices(p, t, bh);
        /* exercise: begin — O = P V of head bh   (Tq, dv) (check 01: o.npy of every case) | stub: (void)x; */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)Tq, (int)dv, (int)Tk, 1.0f,
                    S + bh * Tq * Tk, (int)Tk, x.v, (int)dv, 0.0f, x.o, (int)dv);
        /* exercise: end */
    }
    hbm_count_read(hbm, float_bytes(heads * Tq * Tk) + float_bytes(heads * Tk * dv)); /* P, V */
    hbm_count_write(hbm, float_bytes(heads * Tq * dv));                              /* O */

    blas_threads_pop();
    return FL_OK;
}

static const StageImpl naive_cpu = {
    .stage = "01",
    .name = "naive",
    .variant = "",
    .device = DEVICE_CPU,
    .lesson = "standard attention: S = QK^T and P = softmax(S) materialised in HBM",
    .features = 0,
    .forward = naive_forward,
    .backward = NULL,
    .workspace_bytes = naive_workspace_bytes,
};

const StageImpl *const stage01_naive_cpu[] = {&naive_cpu, NULL};
