/* stages/03_tiled/tiled.c — FlashForward (FA1 loop order) inside an explicit SRAM of M bytes (CPU).
 *
 * One head: Q (Tq, d), K (Tk, d), V (Tk, dv). K, V are split into C = ceil(Tk / Bc) chunks
 * K_j (Bc, d), V_j (Bc, dv); Q and O into ceil(Tq / Br) blocks Q_i (Br, d), O_i (Br, dv).
 * K/V chunks are the outer loop, Q blocks the inner one. Every tile reaches the SRAM arena only
 * through hbm_load() and leaves only through hbm_store(), which count the bytes:
 *   load K_j, V_j
 *   for each i: load Q_i, O_i, m_i, l_i
 *     S = Q_i K_j^T * scale                        (Br, Bc)
 *     m_new = max(m_i, rowmax S),  l_new = exp(m_i - m_new) l_i + rowsum exp(S - m_new)
 *     O_i = (l_i exp(m_i - m_new) / l_new) O_i + (exp(S - m_new) / l_new) V_j   (Br, dv)
 *     store O_i, m_i, l_i   (and lse_i = m_i + log l_i after the last chunk)
 * O, m and l stay in HBM between chunks (m, l in the workspace: extra memory O(T)), so they are
 * re-read and re-written once per chunk: traffic ~ C Tq (d + dv) ~ T^2 (d + dv)^2 / M.
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

static uint64_t float_bytes(size_t n) { return (uint64_t)n * sizeof(float); }

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* One worker's tiles, all inside its SRAM arena of M bytes. */
typedef struct {
    float *K, *V;   /* K_j (Bc, d)   V_j (Bc, dv) */
    float *Q, *O;   /* Q_i (Br, d)   O_i (Br, dv) */
    float *S;       /* scores, then P~   (Br, Bc) */
    float *m, *l;   /* running max and sum of the block's rows   (Br) */
    float *alpha;   /* rescale factor of O_i   (Br) */
    float *lse;     /* m + log l   (Br) */
} Tiles;

/* The m, l of one worker's head live in HBM (the workspace), one float per query row each. */
typedef struct {
    float *m, *l; /* (Tq) */
} RowStats;

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

/* Heads run in parallel, one worker per head at a time. */
static size_t worker_count(const AttnProblem *p, const RunCtx *ctx)
{
    const size_t threads = ctx->threads > 0 ? (size_t)ctx->threads : 1;
    return min_size(threads, (size_t)p->B * p->Hq);
}

static RowStats row_stats_of_worker(const AttnProblem *p, const RunCtx *ctx, size_t worker)
{
    float *base = (float *)ctx->workspace + worker * 2 * (size_t)p->Tq;
    RowStats r = {base, base + p->Tq};
    return r;
}

/* Online softmax of one row of S (n scores) against the running m, l: a <- exp(a - m_new) / l_new,
 * m <- m_new, l <- l_new, and *alpha = l exp(m - m_new) / l_new, the factor that rescales O. */
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
    const float l_old = *l * expf(*m - m_new); /* exp(-inf) = 0 on the first chunk */
    const float l_new = l_old + row_sum;
    const float inv_l = 1.0f / l_new;
    for (size_t j = 0; j < n; j++)
        a[j] *= inv_l;
    *alpha = l_old * inv_l;
    *m = m_new;
    *l = l_new;
}

/* Extra memory: m and l of one head per worker, O(Tq) each. The SRAM arenas are "on chip". */
static size_t tiled_workspace_bytes(const AttnProblem *p, const RunCtx *ctx, Direction dir)
{
    (void)dir;
    return worker_count(p, ctx) * 2 * (size_t)p->Tq * sizeof(float);
}

/* FlashForward of one head: K/V chunks outer, Q blocks inner. */
static void tiled_head(const AttnProblem *p, const Head x, const RowStats r, const Tiles *s,
                       const Blocking *b, HbmCounter *hbm)
{
    const size_t Tq = p->Tq, Tk = p->Tk, d = p->d, dv = p->dv, Br = b->Br, Bc = b->Bc;

    // O = 0, m = -inf, l = 0 in HBM
    for (size_t i = 0; i < Tq; i++) {
        for (size_t c = 0; c < dv; c++)
            x.o[i * dv + c] = 0.0f;
        r.m[i] = -INFINITY;
        r.l[i] = 0.0f;
    }
    hbm_count_write(hbm, float_bytes(Tq * dv) + float_bytes(2 * Tq)); /* O, m, l */

    for (size_t j0 = 0; j0 < Tk; j0 += Bc) {
        const size_t n = min_size(Bc, Tk - j0); /* keys in chunk j; the last one may be short */
        const int last_chunk = j0 + n == Tk;
        hbm_load(hbm, s->K, x.k + j0 * d, n * d);   /* K_j  (n, d) */
        hbm_load(hbm, s->V, x.v + j0 * dv, n * dv); /* V_j  (n, dv) */

        for (size_t i0 = 0; i0 < Tq; i0 += Br) {
            const size_t rows = min_size(Br, Tq - i0); /* rows in block i; the last may be short */
            /* exercise: begin — the tile in SRAM: load, S, softmax, O_i, store, lse_i (check 03: o and lse of every case, and hbm: lines equal to the reference's) | stub: (void)rows, (void)last_chunk; */
            hbm_load(hbm, s->Q, x.q + i0 * d, rows * d);   /* Q_i  (rows, d) */
            hbm_load(hbm, s->O, x.o + i0 * dv, rows * dv); /* O_i  (rows, dv) */
            hbm_load(hbm, s->m, r.m + i0, rows);           /* m_i  (rows) */
            hbm_load(hbm, s->l, r.l + i0, rows);           /* l_i  (rows) */

            // S = Q_i K_j^T * scale   (rows, n)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)n, (int)d,
                        p->scale, s->Q, (int)d, s->K, (int)d, 0.0f, s->S, (int)n);

            // P~ = exp(S - m_new) / l_new in place; m_i, l_i updated; alpha = l exp(m - m_new) / l_new
            for (size_t i = 0; i < rows; i++)
                online_softmax_row(s->S + i * n, n, &s->m[i], &s->l[i], &s->alpha[i]);

            // O_i = alpha O_i + P~ V_j   (rows, dv)
            for (size_t i = 0; i < rows; i++)
                for (size_t c = 0; c < dv; c++)
                    s->O[i * dv + c] *= s->alpha[i];
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)dv, (int)n,
                        1.0f, s->S, (int)n, s->V, (int)dv, 1.0f, s->O, (int)dv);

            hbm_store(hbm, x.o + i0 * dv, s->O, rows * dv); /* O_i */
            hbm_store(hbm, r.m + i0, s->m, rows);           /* m_i */
            hbm_store(hbm, r.l + i0, s->l, rows);           /* l_i */

            // lse_i = m_i + log l_i, once the last chunk is in
            if (last_chunk) {
                for (size_t i = 0; i < rows; i++)
                    s->lse[i] = s->m[i] + logf(s->l[i]);
                hbm_store(hbm, x.lse + i0, s->lse, rows); /* lse_i */
            }
            /* exercise: end */
        }
    }
}

static void arenas_free(SramArena *arenas, size_t count)
{
    for (size_t w = 0; w < count; w++)
        sram_free(&arenas[w]);
    free(arenas);
}

static int tiled_forward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    const size_t heads = (size_t)p->B * p->Hq, workers = worker_count(p, ctx);
    const Blocking b = blocking(p, ctx);

    // One SRAM arena of M bytes per worker, holding that worker's tiles
    SramArena *arenas = calloc(workers, sizeof *arenas);
    Tiles *tiles = calloc(workers, sizeof *tiles);
    if (!arenas || !tiles) {
        free(arenas);
        free(tiles);
        return fl_fail(err, FL_BAD_INPUT, "stage 03: out of host memory for %zu SRAM arenas", workers);
    }
    for (size_t w = 0; w < workers; w++) {
        if (sram_init(&arenas[w], b.M) != 0) {
            arenas_free(arenas, w);
            free(tiles);
            return fl_fail(err, FL_BAD_INPUT, "stage 03: out of host memory for an SRAM arena of M=%zu bytes", b.M);
        }
        if (!tiles_alloc(&arenas[w], p, &b, &tiles[w])) {
            arenas_free(arenas, w + 1);
            free(tiles);
            return fl_fail(err, FL_BAD_INPUT,
                           "stage 03: tiles do not fit in SRAM: M=%zu bytes, Br=%zu, Bc=%zu, d=%d, dv=%d "
                           "need (Br+Bc)(d+dv)+Br*Bc+4*Br floats; raise --sram or lower the block sizes",
                           b.M, b.Br, b.Bc, p->d, p->dv);
        }
    }

    blas_threads_push(1); /* one BLAS thread per OpenMP worker */
#pragma omp parallel for num_threads((int)workers) schedule(dynamic)
    for (long bh = 0; bh < (long)heads; bh++) {
        const size_t w = (size_t)omp_get_thread_num();
        tiled_head(p, head_slices(p, t, (size_t)bh), row_stats_of_worker(p, ctx, w), &tiles[w], &b,
                   ctx->hbm);
    }
    blas_threads_pop();

    arenas_free(arenas, workers);
    free(tiles);
    return FL_OK;
}

static const StageImpl tiled_cpu = {
    .stage = "03",
    .name = "tiled",
    .variant = "",
    .device = DEVICE_CPU,
    .lesson = "FlashForward: K/V chunks outer, Q blocks inner, tiles in an SRAM of M bytes: traffic ~ T^2 d^2 / M",
    .features = 0,
    .forward = tiled_forward,
    .backward = NULL,
    .workspace_bytes = tiled_workspace_bytes,
};

const StageImpl *const stage03_tiled_cpu[] = {&tiled_cpu, NULL};
