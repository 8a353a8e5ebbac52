/* stages/02_chunked/chunked.c — incremental attention over K/V chunks (CPU, OpenBLAS).
 *
 * One head: Q (Tq, d), K (Tk, d), V (Tk, dv). K and V are split into C = ceil(Tk / L) chunks
 * K_j (L, d), V_j (L, dv) of L ("Lambda") keys. A running row max m, running sum l and the
 * output O are updated chunk by chunk, so no T x T matrix ever exists:
 *   A = Q K_j^T * scale                          (Tq, L)
 *   m_new = max(m, rowmax A)                     (Tq)
 *   l_new = exp(m - m_new) l + rowsum exp(A - m_new)
 *   O = (l exp(m - m_new) / l_new) O + (exp(A - m_new) / l_new) V_j     (Tq, dv), kept normalised
 * and at the end lse = m + log l. The scratch is A, m, l and alpha (the factor in front of O) of
 * one head per worker: extra memory O(Tq L), not O(T^2). Traffic is still Theta(T^2): A is
 * written and read for every chunk. Supports plain forward attention (Hq == Hkv, no mask). */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stddef.h>

#include "attn.h"
#include "hbm.h"
#include "parallel.h"

/* L when ctx->block_c is 0: large enough for fast GEMMs, small next to T. */
#define CHUNKED_DEFAULT_CHUNK 128

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

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* One worker's scratch in the workspace. */
typedef struct {
    float *A;     /* scores, then P~, of one chunk   (Tq, L) */
    float *m, *l; /* running max and sum             (Tq) */
    float *alpha; /* rescale factor of O             (Tq) */
} Scratch;

static size_t chunk_size(const RunCtx *ctx)
{
    return ctx->block_c > 0 ? (size_t)ctx->block_c : CHUNKED_DEFAULT_CHUNK;
}

/* Heads run in parallel, one worker per head at a time. */
static size_t worker_count(const AttnProblem *p, const RunCtx *ctx)
{
    const size_t threads = ctx->threads > 0 ? (size_t)ctx->threads : 1;
    return min_size(threads, (size_t)p->B * p->Hq);
}

static size_t scratch_floats(const AttnProblem *p, const RunCtx *ctx)
{
    return (size_t)p->Tq * min_size(chunk_size(ctx), (size_t)p->Tk) + 3 * (size_t)p->Tq;
}

static Scratch scratch_of_worker(const AttnProblem *p, const RunCtx *ctx, size_t worker)
{
    float *base = (float *)ctx->workspace + worker * scratch_floats(p, ctx);
    const size_t Tq = p->Tq, L = min_size(chunk_size(ctx), (size_t)p->Tk);
    Scratch s = {base, base + Tq * L, base + Tq * L + Tq, base + Tq * L + 2 * Tq};
    return s;
}

/* Online softmax of one row of A (n scores) against the running m, l: a <- exp(a - m_new) / l_new,
 * m <- m_new, l <- l_new, and *alpha = l exp(m - m_new) / l_new, the factor that rescales O. */
static void online_softmax_row(float *a, size_t n, float *m, float *l, float *alpha)
{
    float m_new = *m;
    for (size_t j = 0; j < n; j++)
        m_new = fmaxf(m_new, a[j]);
    /* exercise: begin — the online update of a, alpha, m and l (check 02: lse.npy of every case, then o.npy) | stub: *alpha = 0.0f; */
    float row_sum = 0.0f;
    for (size_t j = 0; j < n; j++) {
        a[j] = expf(a[j] - m_new);
        row_sum += a[j];
    }
    const float l_old = *l * expf(*m - m_new); /* exp(-inf) = 0 on the first chunk */
    const float l_new = l_old + row_sum;
    const float inv_l = 1.0f / l_new;
    for (size_t j = 0; j < n; j++)
        a[j] *= inv_l;
    *alpha = l_old * inv_l;
    *m = m_new;
    *l = l_new;
    /* exercise: end */
}

/* Extra memory: one Scratch per worker, O(Tq L) each. */
static size_t chunked_workspace_bytes(const AttnProblem *p, const RunCtx *ctx, Direction dir)
{
    (void)dir;
    return worker_count(p, ctx) * scratch_floats(p, ctx) * sizeof(float);
}

/* Incremental attention of one head, chunk by chunk. */
static void chunked_head(const AttnProblem *p, const Head x, const Scratch s, size_t L,
                         HbmCounter *hbm)
{
    const size_t Tq = p->Tq, Tk = p->Tk, d = p->d, dv = p->dv;

    // O = 0, m = -inf, l = 0
    for (size_t i = 0; i < Tq; i++) {
        for (size_t c = 0; c < dv; c++)
            x.o[i * dv + c] = 0.0f;
        s.m[i] = -INFINITY;
        s.l[i] = 0.0f;
    }
    hbm_count_write(hbm, float_bytes(Tq * dv) + float_bytes(2 * Tq)); /* O, m, l */

    for (size_t j0 = 0; j0 < Tk; j0 += L) {
        const size_t n = min_size(L, Tk - j0); /* keys in chunk j; the last one may be short */

        // A = Q K_j^T * scale   (Tq, n)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)Tq, (int)n, (int)d, p->scale,
                    x.q, (int)d, x.k + j0 * d, (int)d, 0.0f, s.A, (int)n);
        hbm_count_read(hbm, float_bytes(Tq * d) + float_bytes(n * d)); /* Q, K_j */
        hbm_count_write(hbm, float_bytes(Tq * n));                     /* A */

        // P~ = exp(A - m_new) / l_new in place; m, l updated; alpha = l exp(m - m_new) / l_new
        for (size_t i = 0; i < Tq; i++)
            online_softmax_row(s.A + i * n, n, &s.m[i], &s.l[i], &s.alpha[i]);
        hbm_count_read(hbm, float_bytes(Tq * n) + float_bytes(2 * Tq));  /* A, m, l */
        hbm_count_write(hbm, float_bytes(Tq * n) + float_bytes(3 * Tq)); /* P~, m, l, alpha */

        // O = alpha O + P~ V_j   (Tq, dv)
        /* exercise: begin — O = alpha O + P~ V_j   (Tq, dv) (check 02: o.npy of every case) */
        for (size_t i = 0; i < Tq; i++)
            for (size_t c = 0; c < dv; c++)
                x.o[i * dv + c] *= s.alpha[i];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)Tq, (int)dv, (int)n, 1.0f,
                    s.A, (int)n, x.v + j0 * dv, (int)dv, 1.0f, x.o, (int)dv);
        /* exercise: end */
        hbm_count_read(hbm, float_bytes(Tq * dv) + float_bytes(Tq) +
                                float_bytes(Tq * n) + float_bytes(n * dv)); /* O, alpha, P~, V_j */
        hbm_count_write(hbm, float_bytes(Tq * dv));                         /* O */
    }

    // lse = m + log l   (Tq)
    for (size_t i = 0; i < Tq; i++)
        x.lse[i] = s.m[i] + logf(s.l[i]);
    hbm_count_read(hbm, float_bytes(2 * Tq)); /* m, l */
    hbm_count_write(hbm, float_bytes(Tq));    /* lse */
}

static int chunked_forward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    (void)err;
    const size_t heads = (size_t)p->B * p->Hq, L = chunk_size(ctx);
    const int workers = (int)worker_count(p, ctx);

    blas_threads_push(1); /* one BLAS thread per OpenMP worker */
#pragma omp parallel for num_threads(workers) schedule(dynamic)
    for (long bh = 0; bh < (long)heads; bh++) {
        const Scratch s = scratch_of_worker(p, ctx, (size_t)omp_get_thread_num());
        chunked_head(p, head_slices(p, t, (size_t)bh), s, L, ctx->hbm);
    }
    blas_threads_pop();
    return FL_OK;
}

static const StageImpl chunked_cpu = {
    .stage = "02",
    .name = "chunked",
    .variant = "",
    .device = DEVICE_CPU,
    .lesson = "incremental attention over K/V chunks with a running max and sum: O(T*L) extra memory",
    .features = 0,
    .forward = chunked_forward,
    .backward = NULL,
    .workspace_bytes = chunked_workspace_bytes,
};

const StageImpl *const stage02_chunked_cpu[] = {&chunked_cpu, NULL};
