/* stages/07_causal/causal.c — FlashAttention-2 forward and backward inside an explicit SRAM of M bytes (CPU).
 *
 * Forward (unchanged from stage 05).
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
 *
 * Backward (new in stage 06): the gradients of sum(O ∘ dO), per head, never forming a T x T matrix.
 * P is recomputed tile by tile from the lse the forward saved, and the softmax's row term
 * rowsum(P ∘ dP) is replaced by D = rowsum(dO ∘ O), which needs no P at all:
 *   (a) for each Q block: load O_i, dO_i;  D_i = rowsum(dO_i ∘ O_i);  store D_i   (workspace D)
 *       dQ = 0                                                   (one pass over dQ)
 *   (b) for each K/V block j (outer): load K_j, V_j;  dK_j = 0, dV_j = 0   (in SRAM)
 *       for each Q block i (inner): load Q_i, dO_i, lse_i, D_i
 *         S   = Q_i K_j^T * scale               (Br, Bc)
 *         P   = exp(S - lse_i)                  (Br, Bc)
 *         dV_j += P^T dO_i                      (Bc, dv)
 *         dP  = dO_i V_j^T                      (Br, Bc)
 *         dS  = P ∘ (dP - D_i)                  (Br, Bc)
 *         dK_j += scale dS^T Q_i                (Bc, d)
 *         load dQ_i;  dQ_i += scale dS K_j;  store dQ_i   (Br, d)
 *       store dK_j, dV_j                                    (once)
 * Work items are heads, so one worker owns a head's dQ read-modify-writes (no races). Traffic
 * per head ~ Tk (d + dv) twice + ceil(Tk / Bc) Tq (3d + dv + 2): Q, dO, lse, D and dQ stream past
 * every K/V block. Extra memory: D, 4 B Hq Tq bytes. Block sizes: see grad_blocking().
 * Variant "naive": the textbook backward with P and dP materialised in HBM, for comparison (its
 * forward is the FA2 forward above: that variant is about the backward). Its backward is not in
 * this file: it is common/cpu_naive.c, which stages 06, 07, 08 and 10 register alike.
 *
 * New in stage 07: the causal mask, bottom-right aligned (mask.h). Query row i sits at
 * position i + Tk - Tq and sees the keys j <= i + Tk - Tq. Tiles wholly above the diagonal are
 * never loaded: the forward's K/V loop stops at the chunk holding the block's last visible key,
 * and the backward's Q loop starts at the first block that sees K_j. Only tiles that cross the
 * diagonal are masked (S = -inf, or P = 0, past each row's position). A row that sees no key
 * (only when Tq > Tk) gets O = 0, lse = -inf and zero gradients. The naive variant masks P.
 * Supports Hq == Hkv, with or without the causal mask, forward and backward. */

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "naive.h"
#include "hbm.h"
#include "mask.h"
#include "parallel.h"

/* The slices of one head bh = b * Hq + h (Hq == Hkv until stage 08 adds GQA). */
typedef struct {
    const float *q, *k, *v; /* Q (Tq, d)   K (Tk, d)   V (Tk, dv) */
    float *o, *lse;         /* O (Tq, dv)  lse (Tq) */
    const float *dout;      /* dO (Tq, dv)                               backward only */
    float *dq, *dk, *dv;    /* dQ (Tq, d)  dK (Tk, d)  dV (Tk, dv)       backward only */
} Head;

static Head head_slices(const AttnProblem *p, AttnTensors *t, size_t bh)
{
    const size_t Tq = p->Tq, Tk = p->Tk;
    Head x = {p->q + bh * Tq * p->d, p->k + bh * Tk * p->d, p->v + bh * Tk * p->dv,
              t->o + bh * Tq * p->dv, t->lse + bh * Tq, NULL, NULL, NULL, NULL};
    if (p->dout && t->dq) { /* a backward pass: dO and the gradients */
        x.dout = p->dout + bh * Tq * p->dv;
        x.dq = t->dq + bh * Tq * p->d;
        x.dk = t->dk + bh * Tk * p->d;
        x.dv = t->dv + bh * Tk * p->dv;
    }
    return x;
}

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* Sets the keys each row does not see to `value` in a (rows, n) tile of scores (-inf) or
 * probabilities (0): rows from i0, keys from j0. Tiles that do not cross the diagonal are left. */
static void mask_tile(Causal c, float *tile, size_t i0, size_t rows, size_t j0, size_t n, float value)
{
    if (!crosses(c, (int)i0, (int)j0, (int)n))
        return;
    /* exercise: begin — mask_tile: in a crossing tile, set each row's keys past the ones it sees to `value` (-inf for scores, 0 for probabilities) (check 07: o and lse of every causal_* case) | stub: (void)tile, (void)rows, (void)value; */
    for (size_t i = 0; i < rows; i++)
        for (size_t j = (size_t)seen_in_tile(c, (int)(i0 + i), (int)j0, (int)n); j < n; j++)
            tile[i * n + j] = value;
    /* exercise: end */
}

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
 * the factor that rescales the unnormalised Õ. Masked scores are -inf and give a = 0. */
static void online_softmax_row(float *a, size_t n, float *m, float *l, float *alpha)
{
    float m_new = *m;
    for (size_t j = 0; j < n; j++)
        m_new = fmaxf(m_new, a[j]);
    /* A row that has seen no key yet keeps m = -inf: exponentiate against 0 instead, so that its
     * a and alpha are exp(-inf) = 0, not exp(-inf + inf) = NaN. */
    const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
    float row_sum = 0.0f;
    for (size_t j = 0; j < n; j++) {
        a[j] = expf(a[j] - m_ref);
        row_sum += a[j];
    }
    *alpha = expf(*m - m_ref); /* exp(-inf) = 0 on the first chunk */
    *l = *l * *alpha + row_sum;
    *m = m_new;
}

/* FlashForward2 of one query block Q_i (rows from i0) of one head: K/V chunks inner. */
static void fa2_block(const AttnProblem *p, const Head x, size_t i0, const Tiles *s,
                      const Blocking *b, HbmCounter *hbm)
{
    const size_t Tq = p->Tq, d = p->d, dv = p->dv, Br = b->Br, Bc = b->Bc;
    const size_t rows = min_size(Br, Tq - i0); /* rows in block i; the last may be short */
    const Causal causal = causal_make(p->causal, p->Tq, p->Tk);
    /* Keys up to the block's last row's position; the chunks past them are never loaded. */
    /* exercise: begin — forward: stop the K/V walk after the last key the block's last row sees; the chunks above the diagonal are never loaded (check 07: no IO FAIL on causal_b2_t48_fwd) | stub: const size_t Tk = p->Tk; */
    const size_t Tk = (size_t)keys_seen(causal, (int)(i0 + rows - 1));
    /* exercise: end */

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
        // Only a chunk that crosses the diagonal is masked: S = -inf past each row's position
        mask_tile(causal, s->S, i0, rows, j0, n, -INFINITY);

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

    // One rescale: O_i = Õ_i / l_i, lse_i = m_i + log l_i; both written once. A row that saw no
    // key (l = 0) gets O = 0 and lse = -inf.
    for (size_t i = 0; i < rows; i++) {
        /* exercise: begin — the one rescale of row i: O_i = Õ_i / l_i and lse_i = m_i + log l_i, but a row that saw no key (l = 0) gets O = 0 and lse = -inf (check 07: causal_tq_gt_tk, whose first rows see no key) | stub: s->lse[i] = s->m[i] + logf(s->l[i]); for (size_t c = 0; c < dv; c++) s->O[i * dv + c] /= s->l[i]; */
        const int empty = s->l[i] == 0.0f;
        const float inv_l = empty ? 0.0f : 1.0f / s->l[i];
        for (size_t c = 0; c < dv; c++)
            s->O[i * dv + c] *= inv_l;
        s->lse[i] = empty ? -INFINITY : s->m[i] + logf(s->l[i]);
        /* exercise: end */
    }
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

/* ==== Backward ================================================================================= */

static uint64_t float_bytes(size_t n) { return (uint64_t)n * sizeof(float); }

/* sum_c a[c] b[c], accumulated in double: D_i = rowsum(dO_i ∘ O_i). */
static float row_dot(const float *a, const float *b, size_t n)
{
    double acc = 0.0;
    for (size_t c = 0; c < n; c++)
        acc += (double)a[c] * b[c];
    return (float)acc;
}

/* The shift that turns a row of scores into log P = S - lse. A row that sees no key has
 * lse = -inf; its shift is -inf as well, so its P = exp(-inf) = 0, never exp(+inf) or NaN, and
 * its gradients are 0. */
static float log_p_shift(float lse) { return lse == -INFINITY ? -INFINITY : -lse; }

/* x <- exp(x + shift) for n values: P = exp(S - lse) with shift = log_p_shift(lse). */
static void exp_shifted(float *x, size_t n, float shift)
{
    for (size_t j = 0; j < n; j++)
        x[j] = expf(x[j] + shift);
}

/* x <- value for n values: the rows a GEMM then accumulates onto. */
static void fill_row(float *x, size_t n, float value)
{
    for (size_t j = 0; j < n; j++)
        x[j] = value;
}

/* ---- flash backward: the FA2 backward in the SRAM arena -------------------------------------- */

/* One worker's tiles. Phase (a) and phase (b) use the same M bytes one after the other. */
typedef struct {
    float *O, *dO, *D;     /* (a): O_i (Br, dv)   dO_i (Br, dv)   D_i (Br) */
} RowSumTiles;

typedef struct {
    RowSumTiles a;
    float *K, *V;          /* K_j (Bc, d)    V_j (Bc, dv) */
    float *dK, *dV;        /* dK_j (Bc, d)   dV_j (Bc, dv), summed over the Q blocks */
    float *Q, *dO, *dQ;    /* Q_i (Br, d)    dO_i (Br, dv)   dQ_i (Br, d) */
    float *lse, *D;        /* lse_i, D_i   (Br) */
    float *P, *dS;         /* P_ij (Br, Bc);  dP_ij, then dS_ij (Br, Bc) */
} GradTiles;

/* Backward block sizes from M (M_f = M / 4 floats). Phase (b) holds
 *   K_j, V_j, dK_j, dV_j: 2 Bc (d + dv)      Q_i, dO_i, dQ_i, lse_i, D_i: Br (2d + dv + 2)
 *   P, dS: 2 Br Bc
 * floats in 11 buffers, whose 64-byte alignment wastes less than 11 * 16 floats.
 *   Bc = max(1, M_f / (4 (d + dv)))     as in the forward: the K/V side takes at most M_f / 2;
 *   Br = min(Bc, d, (M_f / 2 - 176) / (2d + dv + 2 + 2 Bc)): the Q side fits the other half;
 *        rounded down to a multiple of 8 when >= 8 (BLAS runs such row counts faster), and >= 1.
 * Phase (a), Br (2 dv + 1) floats, is then smaller than M_f too. M = 128 KiB, d = dv = 64 gives
 * Bc = 64, Br = 48. ctx->block_r / block_c win; tiles that do not fit fail loudly. */
static Blocking grad_blocking(const AttnProblem *p, const RunCtx *ctx)
{
    Blocking b;
    b.M = ctx->sram_bytes > 0 ? ctx->sram_bytes : FLASHLAB_DEFAULT_SRAM_BYTES;
    const size_t M_f = b.M / sizeof(float), d = p->d, dv = p->dv, pad = 11 * 16;
    b.Bc = ctx->block_c > 0 ? (size_t)ctx->block_c : max_size(1, M_f / (4 * (d + dv)));
    const size_t half = M_f / 2 > pad ? M_f / 2 - pad : 0;
    size_t Br = min_size(min_size(b.Bc, d), half / (2 * d + dv + 2 + 2 * b.Bc));
    Br = Br >= 8 ? Br / 8 * 8 : max_size(1, Br);
    b.Br = ctx->block_r > 0 ? (size_t)ctx->block_r : Br;
    return b;
}

/* Carves both phases' tiles from a fresh arena; 0 when either does not fit in M bytes. */
static int grad_tiles_alloc(SramArena *arena, const AttnProblem *p, const Blocking *b, GradTiles *s)
{
    const size_t d = p->d, dv = p->dv, Br = b->Br, Bc = b->Bc;
    s->a.O = sram_alloc(arena, Br * dv);
    s->a.dO = sram_alloc(arena, Br * dv);
    s->a.D = sram_alloc(arena, Br);
    const int a_fits = s->a.O && s->a.dO && s->a.D;
    sram_reset(arena); /* phase (b) reuses the same M bytes */
    s->K = sram_alloc(arena, Bc * d);
    s->V = sram_alloc(arena, Bc * dv);
    s->dK = sram_alloc(arena, Bc * d);
    s->dV = sram_alloc(arena, Bc * dv);
    s->Q = sram_alloc(arena, Br * d);
    s->dO = sram_alloc(arena, Br * dv);
    s->dQ = sram_alloc(arena, Br * d);
    s->lse = sram_alloc(arena, Br);
    s->D = sram_alloc(arena, Br);
    s->P = sram_alloc(arena, Br * Bc);
    s->dS = sram_alloc(arena, Br * Bc);
    return a_fits && s->K && s->V && s->dK && s->dV && s->Q && s->dO && s->dQ && s->lse && s->D &&
           s->P && s->dS;
}

/* (a) D = rowsum(dO ∘ O) of one head   (Tq), from O and dO tiles, stored to the workspace. */
static void rowsum_dO_O(const AttnProblem *p, const Head x, float *D, const RowSumTiles *s,
                        const Blocking *b, HbmCounter *hbm)
{
    const size_t Tq = p->Tq, dv = p->dv;
    for (size_t i0 = 0; i0 < Tq; i0 += b->Br) {
        const size_t rows = min_size(b->Br, Tq - i0);
        hbm_load(hbm, s->O, x.o + i0 * dv, rows * dv);     /* O_i  (rows, dv) */
        hbm_load(hbm, s->dO, x.dout + i0 * dv, rows * dv); /* dO_i (rows, dv) */
        // D_i = rowsum(dO_i ∘ O_i)   (rows)
        for (size_t i = 0; i < rows; i++)
            s->D[i] = row_dot(s->dO + i * dv, s->O + i * dv, dv);
        hbm_store(hbm, D + i0, s->D, rows); /* D_i */
    }
}

/* One (Q block i, K/V block j) step of the inner loop: rows query rows from i0, n keys from j0. */
static void grad_tile(const AttnProblem *p, const Head x, const float *D, size_t i0, size_t rows,
                      size_t j0, size_t n, const GradTiles *s, HbmCounter *hbm)
{
    const size_t d = p->d, dv = p->dv;
    const Causal causal = causal_make(p->causal, p->Tq, p->Tk);
    hbm_load(hbm, s->Q, x.q + i0 * d, rows * d);        /* Q_i   (rows, d) */
    hbm_load(hbm, s->dO, x.dout + i0 * dv, rows * dv);  /* dO_i  (rows, dv) */
    hbm_load(hbm, s->lse, x.lse + i0, rows);            /* lse_i (rows) */
    hbm_load(hbm, s->D, D + i0, rows);                  /* D_i   (rows) */

    // S - lse_i = Q_i K_j^T * scale - lse_i   (rows, n): the GEMM adds onto rows preset to -lse_i
    for (size_t i = 0; i < rows; i++)
        fill_row(s->P + i * n, n, log_p_shift(s->lse[i]));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)n, (int)d, p->scale,
                s->Q, (int)d, s->K, (int)d, 1.0f, s->P, (int)n);
    // P = exp(S - lse_i)   (rows, n), recomputed from the saved lse; 0 above the diagonal
    exp_shifted(s->P, rows * n, 0.0f);
    mask_tile(causal, s->P, i0, rows, j0, n, 0.0f);
    // dV_j += P^T dO_i   (n, dv)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n, (int)dv, (int)rows, 1.0f,
                s->P, (int)n, s->dO, (int)dv, 1.0f, s->dV, (int)dv);
    // dP - D_i = dO_i V_j^T - D_i   (rows, n): the GEMM adds onto rows preset to -D_i
    for (size_t i = 0; i < rows; i++)
        fill_row(s->dS + i * n, n, -s->D[i]);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)n, (int)dv, 1.0f,
                s->dO, (int)dv, s->V, (int)dv, 1.0f, s->dS, (int)n);
    // dS = P ∘ (dP - D_i)   (rows, n), in place
    for (size_t k = 0; k < rows * n; k++)
        s->dS[k] *= s->P[k];
    // dK_j += scale * dS^T Q_i   (n, d)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n, (int)d, (int)rows, p->scale,
                s->dS, (int)n, s->Q, (int)d, 1.0f, s->dK, (int)d);
    // dQ_i += scale * dS K_j   (rows, d): read-modify-write of dQ in HBM
    hbm_load(hbm, s->dQ, x.dq + i0 * d, rows * d);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)d, (int)n, p->scale,
                s->dS, (int)n, s->K, (int)d, 1.0f, s->dQ, (int)d);
    hbm_store(hbm, x.dq + i0 * d, s->dQ, rows * d);
}

/* FlashBackward of one head: (a) D and dQ = 0, then (b) K/V blocks outer, Q blocks inner. */
static void grad_head(const AttnProblem *p, const Head x, float *D, const GradTiles *s,
                      const Blocking *b, HbmCounter *hbm)
{
    const size_t Tq = p->Tq, Tk = p->Tk, d = p->d, dv = p->dv, Br = b->Br, Bc = b->Bc;
    const Causal causal = causal_make(p->causal, p->Tq, p->Tk);
    rowsum_dO_O(p, x, D, &s->a, b, hbm);
    // dQ = 0   (Tq, d): one pass; the inner loop accumulates into it
    memset(x.dq, 0, Tq * d * sizeof(float));
    hbm_count_write(hbm, float_bytes(Tq * d));

    for (size_t j0 = 0; j0 < Tk; j0 += Bc) {
        const size_t n = min_size(Bc, Tk - j0); /* keys in block j; the last one may be short */
        hbm_load(hbm, s->K, x.k + j0 * d, n * d);   /* K_j  (n, d) */
        hbm_load(hbm, s->V, x.v + j0 * dv, n * dv); /* V_j  (n, dv) */
        // dK_j = 0, dV_j = 0, in SRAM
        memset(s->dK, 0, n * d * sizeof(float));
        memset(s->dV, 0, n * dv * sizeof(float));
        // Q blocks from the first one that sees K_j; the ones above the diagonal are skipped
        /* exercise: begin — backward: walk the Q blocks from the first one with a row that sees K_j; those above the diagonal are skipped (check 07: no IO FAIL on the fwd+bwd causal cases) | stub: for (size_t i0 = 0 * (size_t)causal.on; i0 < Tq; i0 += Br) grad_tile(p, x, D, i0, min_size(Br, Tq - i0), j0, n, s, hbm); */
        for (size_t i0 = (size_t)first_row_seeing(causal, (int)j0) / Br * Br; i0 < Tq; i0 += Br)
            grad_tile(p, x, D, i0, min_size(Br, Tq - i0), j0, n, s, hbm);
        /* exercise: end */
        hbm_store(hbm, x.dk + j0 * d, s->dK, n * d);    /* dK_j, once */
        hbm_store(hbm, x.dv + j0 * dv, s->dV, n * dv);  /* dV_j, once */
    }
}

/* D = rowsum(dO ∘ O) of every row, (B, Hq, Tq) floats, is the backward's only extra memory. */
static size_t flash_workspace_bytes(const AttnProblem *p, const RunCtx *ctx, Direction dir)
{
    (void)ctx;
    return dir == DIR_BWD ? (size_t)p->B * p->Hq * p->Tq * sizeof(float) : 0;
}

/* One SRAM arena of M bytes per worker, carved into GradTiles; FL_BAD_INPUT when they do not fit. */
static int grad_arenas_make(const AttnProblem *p, const Blocking *b, size_t workers,
                            SramArena **arenas_out, GradTiles **tiles_out, FlError *err)
{
    SramArena *arenas = calloc(workers, sizeof *arenas);
    GradTiles *tiles = calloc(workers, sizeof *tiles);
    int rc = FL_OK;
    size_t made = 0;
    if (!arenas || !tiles)
        rc = fl_fail(err, FL_BAD_INPUT, "flash backward: out of host memory for %zu SRAM arenas", workers);
    for (; rc == FL_OK && made < workers; made++) {
        if (sram_init(&arenas[made], b->M) != 0)
            rc = fl_fail(err, FL_BAD_INPUT, "flash backward: out of host memory for an SRAM arena of M=%zu bytes", b->M);
        else if (!grad_tiles_alloc(&arenas[made], p, b, &tiles[made]))
            rc = fl_fail(err, FL_BAD_INPUT,
                         "flash backward: tiles do not fit in SRAM: M=%zu bytes, Br=%zu, Bc=%zu, d=%d, dv=%d "
                         "need 2*Bc*(d+dv)+Br*(2d+dv+2)+2*Br*Bc floats; raise --sram or lower the block sizes",
                         b->M, b->Br, b->Bc, p->d, p->dv);
    }
    if (rc != FL_OK) {
        if (arenas)
            arenas_free(arenas, made);
        free(tiles);
        return rc;
    }
    *arenas_out = arenas;
    *tiles_out = tiles;
    return FL_OK;
}

static int flash_backward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    const Blocking b = grad_blocking(p, ctx);
    const size_t heads = (size_t)p->B * p->Hq;
    const size_t threads = ctx->threads > 0 ? (size_t)ctx->threads : 1;
    const size_t workers = max_size(1, min_size(threads, heads));
    float *D = ctx->workspace; /* D (B, Hq, Tq) */
    SramArena *arenas;
    GradTiles *tiles;
    const int rc = grad_arenas_make(p, &b, workers, &arenas, &tiles, err);
    if (rc != FL_OK)
        return rc;

    blas_threads_push(1); /* one BLAS thread per OpenMP worker */
    // Work item = one head: its dQ read-modify-writes belong to one worker, so no two race
#pragma omp parallel for num_threads((int)workers) schedule(dynamic)
    for (long bh = 0; bh < (long)heads; bh++) {
        const size_t w = (size_t)omp_get_thread_num();
        grad_head(p, head_slices(p, t, (size_t)bh), D + (size_t)bh * p->Tq, &tiles[w], &b, ctx->hbm);
    }
    blas_threads_pop();

    arenas_free(arenas, workers);
    free(tiles);
    return FL_OK;
}

static const StageImpl flash = {
    .stage = "07",
    .name = "causal",
    .variant = "",
    .device = DEVICE_CPU,
    .lesson = "causal FA2: tiles above the diagonal never loaded, only the diagonal tiles masked",
    .features = FEAT_BACKWARD | FEAT_CAUSAL,
    .forward = fa2_forward,
    .backward = flash_backward,
    .workspace_bytes = flash_workspace_bytes, /* D in the backward; nothing in the forward */
};

/* The naive variant is about the backward: its forward is this file's FA2 forward, which
 * provides the o and lse that the shared textbook backward (common/cpu_naive.c) reads. */
static const StageImpl naive = {
    .stage = "07",
    .name = "causal",
    .variant = "naive",
    .device = DEVICE_CPU,
    .lesson = "textbook backward, P and dP materialised in HBM, causal mask applied to P",
    .features = FEAT_BACKWARD | FEAT_CAUSAL,
    .forward = fa2_forward,
    .backward = cpu_naive_backward,
    .workspace_bytes = cpu_naive_workspace_bytes, /* P and dP in the backward; nothing in the forward */
};

const StageImpl *const stage07_causal_cpu[] = {&flash, &naive, NULL};
