/* stages/05_fa2/fa2.c — FlashAttention-2 forward (Q blocks outer) inside an explicit SRAM of M bytes (CPU).
 *
 * One head: Q (Tq, d), K (Tk, d), V (Tk, dv). Q and O are split into ceil(Tq / Br) blocks
 * Q_i (Br, d), O_i (Br, dv); K, V into C = ceil(Tk / Bc) chunks K_j (Bc, d), V_j (Bc, dv).
 * FA2 swaps stage 03's loops: Q blocks are the outer loop (independent: one OpenMP task per
 * (b, h, i)), K/V chunks the inner one. Q_i, the accumulator and m_i, l_i stay in SRAM for the
 * whole inner loop, and the accumulator is kept unnormalised (the rescales telescope):
 *   load Q_i;  m_i = -inf, l_i = 0, Õ_i = 0   (in SRAM)
 *   for each j: load K_j, V_j
 *     S = Q_i K_j^T * scale                              (Br, Bc)
 *     m_new = max(m_i, rowmax S),  P~ = exp(S - m_new)   (Br, Bc)
 *     l_i = exp(m_i - m_new) l_i + rowsum P~
 *     Õ_i = exp(m_i - m_new) Õ_i + P~ V_j                (Br, dv)
 *   O_i = Õ_i / l_i,  lse_i = m_i + log l_i;  store O_i, lse_i   (once)
 * Every tile reaches SRAM through hbm_load() and leaves through hbm_store(), which count bytes:
 * Q is read once, O and lse written once, K and V read once per Q block:
 *   traffic ~ Tq d + ceil(Tq / Br) Tk (d + dv) + Tq (dv + 1) per head, no workspace at all.
 * Block sizes from M (floats M_f = M / 4): Bc = max(1, M_f / (4 (d + dv))), Br = max(1, min(Bc, d)).
 * Supports plain forward attention (Hq == Hkv, no mask). */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdlib.h>

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

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* One worker's tiles, all inside its SRAM arena of M bytes. */
typedef struct {
    float *K, *V;   /* K_j (Bc, d)   V_j (Bc, dv) */
    float *Q, *O;   /* Q_i (Br, d)   Õ_i, then O_i (Br, dv) */
    float *S;       /* scores, then P~   (Br, Bc) */
    float *m, *l;   /* running max and unnormalised sum of the block's rows   (Br) */
    float *alpha;   /* rescale factor of Õ_i   (Br) */
    float *lse;     /* m + log l   (Br) */
} Tiles;

typedef struct {
    size_t M, Br, Bc;
} Blocking;

/* The papers' rule Bc = M / (4d), Br = min(Bc, d), with (d + dv) / 2 for d and a factor 2 margin
 * so that every tile fits (docs/hbm_model.md shows the inequality). ctx->block_r / block_c win. */
static Blocking blocking(const AttnProblem *p, const RunCtx *ctx)
{
    Blocking b;
    b.M = ctx->sram_bytes > 0 ? ctx->sram_bytes : FLASHLAB_DEFAULT_SRAM_BYTES;
    const size_t M_f = b.M / sizeof(float);
    b.Bc = ctx->block_c > 0 ? (size_t)ctx->block_c : max_size(1, M_f / (4 * (size_t)(p->d + p->dv)));
    b.Br = ctx->block_r > 0 ? (size_t)ctx->block_r : max_size(1, min_size(b.Bc, (size_t)p->d));
    return b;
}

/* Carves the tiles from a fresh arena; 0 when they do not fit in M bytes. */
static int tiles_alloc(SramArena *a, const AttnProblem *p, const Blocking *b, Tiles *s)
{
    const size_t d = p->d, dv = p->dv, Br = b->Br, Bc = b->Bc;
    s->K = sram_alloc(a, Bc * d);
    s->V = sram_alloc(a, Bc * dv);
    s->Q = sram_alloc(a, Br * d);
    s->O = sram_alloc(a, Br * dv);
    s->S = sram_alloc(a, Br * Bc);
    s->m = sram_alloc(a, Br);
    s->l = sram_alloc(a, Br);
    s->alpha = sram_alloc(a, Br);
    s->lse = sram_alloc(a, Br);
    return s->K && s->V && s->Q && s->O && s->S && s->m && s->l && s->alpha && s->lse;
}

/* Q blocks of every head run in parallel: work item (b, h, i), one worker per item at a time. */
static size_t block_count(const AttnProblem *p, const Blocking *b)
{
    return (size_t)p->B * p->Hq * ((p->Tq + b->Br - 1) / b->Br);
}

static size_t worker_count(const AttnProblem *p, const RunCtx *ctx, const Blocking *b)
{
    const size_t threads = ctx->threads > 0 ? (size_t)ctx->threads : 1;
    return max_size(1, min_size(threads, block_count(p, b)));
}

/* Online softmax of one row of S (n scores) against the running m, l, without normalising:
 * a <- exp(a - m_new), l <- exp(m - m_new) l + rowsum a, m <- m_new, and *alpha = exp(m - m_new),
 * the factor that rescales the unnormalised Õ. */
static void online_softmax_row(float *a, size_t n, float *m, float *l, float *alpha)
{
    float m_new = *m;
    for (size_t j = 0; j < n; j++)
        m_new = fmaxf(m_new, a[j]);
    float row_sum = 0.0f;
    for (size_t j = 0; j < n; j++) {
        a[j] = expf(a[j] - m_new);
        row_sum += a[j];
    }
    /* exercise: begin — alpha, l and m, without normalising (check 05: lse.npy of every case) | stub: *alpha = 1.0f; */
    *alpha = expf(*m - m_new); /* exp(-inf) = 0 on the first chunk */
    *l = *l * *alpha + row_sum;
    *m = m_new;
    /* exercise: end */
}

/* FlashForward2 of one query block Q_i (rows from i0) of one head: K/V chunks inner. */
static void fa2_block(const AttnProblem *p, const Head x, size_t i0, const Tiles *s,
                      const Blocking *b, HbmCounter *hbm)
{
    const size_t Tq = p->Tq, Tk = p->Tk, d = p->d, dv = p->dv, Br = b->Br, Bc = b->Bc;
    const size_t rows = min_size(Br, Tq - i0); /* rows in block i; the last may be short */

    hbm_load(hbm, s->Q, x.q + i0 * d, rows * d); /* Q_i  (rows, d), read once */
    // Õ_i = 0, m_i = -inf, l_i = 0, in SRAM
    for (size_t i = 0; i < rows; i++) {
        for (size_t c = 0; c < dv; c++)
            s->O[i * dv + c] = 0.0f;
        s->m[i] = -INFINITY;
        s->l[i] = 0.0f;
    }

    for (size_t j0 = 0; j0 < Tk; j0 += Bc) {
        const size_t n = min_size(Bc, Tk - j0); /* keys in chunk j; the last one may be short */
        hbm_load(hbm, s->K, x.k + j0 * d, n * d);   /* K_j  (n, d) */
        hbm_load(hbm, s->V, x.v + j0 * dv, n * dv); /* V_j  (n, dv) */

        // S = Q_i K_j^T * scale   (rows, n)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)n, (int)d, p->scale,
                    s->Q, (int)d, s->K, (int)d, 0.0f, s->S, (int)n);

        // P~ = exp(S - m_new) in place; m_i, l_i updated; alpha = exp(m - m_new)
        for (size_t i = 0; i < rows; i++)
            online_softmax_row(s->S + i * n, n, &s->m[i], &s->l[i], &s->alpha[i]);

        // Õ_i = alpha Õ_i + P~ V_j   (rows, dv)
        for (size_t i = 0; i < rows; i++)
            for (size_t c = 0; c < dv; c++)
                s->O[i * dv + c] *= s->alpha[i];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)dv, (int)n, 1.0f,
                    s->S, (int)n, s->V, (int)dv, 1.0f, s->O, (int)dv);
    }

    // One rescale: O_i = Õ_i / l_i, lse_i = m_i + log l_i; both written once
    /* exercise: begin — the one rescale: O_i = Õ_i / l_i, lse_i = m_i + log l_i (check 05: o.npy, and hbm written equal to the reference's) */
    for (size_t i = 0; i < rows; i++) {
        const float inv_l = 1.0f / s->l[i];
        for (size_t c = 0; c < dv; c++)
            s->O[i * dv + c] *= inv_l;
        s->lse[i] = s->m[i] + logf(s->l[i]);
    }
    /* exercise: end */
    hbm_store(hbm, x.o + i0 * dv, s->O, rows * dv); /* O_i */
    hbm_store(hbm, x.lse + i0, s->lse, rows);       /* lse_i */
}

static void arenas_free(SramArena *arenas, size_t count)
{
    for (size_t w = 0; w < count; w++)
        sram_free(&arenas[w]);
    free(arenas);
}

static int fa2_forward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    const Blocking b = blocking(p, ctx);
    const size_t blocks = block_count(p, &b), workers = worker_count(p, ctx, &b);
    const size_t blocks_per_head = (p->Tq + b.Br - 1) / b.Br;

    // One SRAM arena of M bytes per worker, holding that worker's tiles
    SramArena *arenas = calloc(workers, sizeof *arenas);
    Tiles *tiles = calloc(workers, sizeof *tiles);
    if (!arenas || !tiles) {
        free(arenas);
        free(tiles);
        return fl_fail(err, FL_BAD_INPUT, "FA2 forward: out of host memory for %zu SRAM arenas", workers);
    }
    for (size_t w = 0; w < workers; w++) {
        if (sram_init(&arenas[w], b.M) != 0) {
            arenas_free(arenas, w);
            free(tiles);
            return fl_fail(err, FL_BAD_INPUT, "FA2 forward: out of host memory for an SRAM arena of M=%zu bytes", b.M);
        }
        if (!tiles_alloc(&arenas[w], p, &b, &tiles[w])) {
            arenas_free(arenas, w + 1);
            free(tiles);
            return fl_fail(err, FL_BAD_INPUT,
                           "FA2 forward: tiles do not fit in SRAM: M=%zu bytes, Br=%zu, Bc=%zu, d=%d, dv=%d "
                           "need (Br+Bc)(d+dv)+Br*Bc+4*Br floats; raise --sram or lower the block sizes",
                           b.M, b.Br, b.Bc, p->d, p->dv);
        }
    }

    blas_threads_push(1); /* one BLAS thread per OpenMP worker */
#pragma omp parallel for num_threads((int)workers) schedule(dynamic)
    for (long item = 0; item < (long)blocks; item++) {
        const size_t w = (size_t)omp_get_thread_num();
        const size_t bh = (size_t)item / blocks_per_head, i0 = (size_t)item % blocks_per_head * b.Br;
        fa2_block(p, head_slices(p, t, bh), i0, &tiles[w], &b, ctx->hbm);
    }
    blas_threads_pop();

    arenas_free(arenas, workers);
    free(tiles);
    return FL_OK;
}

static const StageImpl fa2_cpu = {
    .stage = "05",
    .name = "fa2",
    .variant = "",
    .device = DEVICE_CPU,
    .lesson = "FlashAttention-2: Q blocks outer, unnormalised accumulator in SRAM, O and lse written once",
    .features = 0,
    .forward = fa2_forward,
    .backward = NULL,
    .workspace_bytes = NULL, /* m, l never leave SRAM: no extra memory */
};

const StageImpl *const stage05_fa2_cpu[] = {&fa2_cpu, NULL};
