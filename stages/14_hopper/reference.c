/* stages/14_hopper/reference.c — the CPU reference of stage 14's tensor-core arithmetic, which is
 * stage 12's: the Hopper kernels round at the same points and walk the same tiles.
 *
 * Stage 12's kernels (tensor_cores.cu) run FlashAttention-2 with bf16 operands on tensor cores:
 * every product of two bf16 numbers is exact in float32 and the sums run in float32, but the
 * inputs and two intermediate matrices are rounded to bf16 (8 significant bits, u = 2^-8) on the
 * way into a matrix product. A result that differs from the float64 golden file by 1e-2 is then
 * not evidence of a bug. This file computes the same function with the same rounding at the same
 * points, in plain C, so the lesson can tell the two apart: if the kernel agrees with this
 * reference to float32 noise, its error against the golden file is the bf16 rounding itself.
 *
 * The rounding points (common/bf16.h, round to nearest even, the same function everywhere):
 *   Q16, K16, V16, dO16   the inputs, rounded once by the runner (AttnProblem.q_bf16, ...)
 *   bf16(P)               before P V (forward) and before P^T dO (backward); l sums the unrounded P
 *   bf16(dS)              before dS K (dQ) and dS^T Q (dK)
 * Everything else is float32: S, the running max m and sum l, O, D, dP, dS itself, the outputs.
 *
 * The tiles are the kernels' (tiles.h): the rounding of P depends on the running max, which
 * changes at the end of every K/V tile, so the reference walks the keys in the same tiles of
 * TC_FWD_BLOCK_C = 128 in the forward (stage 12: 64). The online softmax runs in base 2, as on the
 * GPU: s2 = S * scale * log2(e).
 *
 * Forward, per (b, h) and query block Q_i of TC_FWD_BLOCK_R(d) rows (one thread block's rows: 192
 * at d = 64, 128 at d = 128; cut from the head's last row back, TC_FWD_BLOCK_END):
 *   load Q16_i;  m = -inf, l = 0, O = 0
 *   for each K/V tile j (TC_FWD_BLOCK_C keys) up to the block's last visible key:
 *     load K16_j, V16_j
 *     S   = Q16_i K16_j^T                          (Br, Bc)   float32 sums
 *     s2  = S * scale * log2(e), -inf past each row's last key (causal)
 *     m_new = max(m, rowmax s2);  alpha = exp2(m - m_new)   (1 while m_new = -inf)
 *     P   = exp2(s2 - m_new)                        (Br, Bc)   float32, shifted by 0 while m_new = -inf
 *     l   = alpha l + rowsum(P)                     unrounded P
 *     O   = alpha O + bf16(P) V16_j                 (Br, dv)   over the keys the row sees
 *     m   = m_new
 *   o = O / l (0 when l = 0),  lse = (m + log2 l) ln 2 (-inf when l = 0);  store o, lse
 *
 * Backward, with D = rowsum(dO16 ∘ o) first (o the float32 forward output), then per (b, kv head)
 * and key tile K16_j, V16_j of TC_BWD_BLOCK_C(d) keys (one thread block of the kernel: 192 at d = 64,
 * 128 at d = 128):
 *   dK_j = 0, dV_j = 0
 *   for every query head of the group, for each query tile Q_i of TC_BWD_BLOCK_R = 64 rows whose
 *   last row sees key j0 (the others lie above the causal diagonal: skipped):
 *     load Q16_i, dO16_i, lse_i, D_i
 *     P    = exp2(S * scale * log2(e) - lse * log2(e))   (Br, Bc)  0 for masked keys
 *     dV_j += bf16(P)^T dO16_i                 (Bc, dv)
 *     dP   = dO16_i V16_j^T                     (Br, Bc)
 *     dS   = P ∘ (dP - D_i)                     (Br, Bc)  unrounded P
 *     dK_j += bf16(dS)^T Q16_i                  (Bc, d)
 *     dQ_i += scale * (bf16(dS) K16_j)           (Br, d)   read-modify-write of dq in HBM, once
 *                                                  per TC_BWD_WG_KEYS keys (tiles.h)
 *   dK_j *= scale;  store dK_j, dV_j
 * The GPU adds into dQ with atomics in whatever order its blocks finish; here one worker owns a kv
 * head and its group's dq rows, and adds the key tiles in order.
 *
 * HBM bytes are counted where the kernels count them and at their sizes: bf16 inputs 2 bytes an
 * element, float32 outputs, lse, D and dq 4 bytes (docs/hbm_model.md, "Stage 12"). The tiles
 * below stand for the kernel's registers and shared memory: they are not extra memory. The
 * workspace is D, B Hq Tq floats, in the backward. */

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "bf16.h"
#include "hbm.h"
#include "tiles.h"

/* Test hook, 0 in the stage that ships. tests/test_tc_planted_bug.c compiles this file a second
 * time with TC_PLANTED_BUG = 1 (the forward forgets the rescale alpha) or 2 (the backward forgets
 * D), to show that the bf16 tolerance still catches such a bug on the golden cases. */
#ifndef TC_PLANTED_BUG
#define TC_PLANTED_BUG 0
#endif

#define LOG2E 1.4426950408889634f /* log2(e) */
#define LN2 0.6931471805599453f   /* ln(2) */

static int min_int(int a, int b) { return a < b ? a : b; }

/* The keys [0, n) row i of a head sees (tiles.h, the rule the kernels use). */
static int keys_seen(const AttnProblem *p, int i)
{
    return tc_keys_seen(p->causal, p->Tq, p->Tk, i);
}

/* Of the keys [j0, j0 + n), how many row i sees: always a prefix of the tile. */
static int seen_in_tile(const AttnProblem *p, int i, int j0, int n)
{
    const int k = keys_seen(p, i) - j0;
    return k <= 0 ? 0 : min_int(k, n);
}

/* Widens n bf16 values to float (exact: a bf16 is the top half of a float). */
static void widen(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = bf16_to_float(src[i]);
}

/* Widens a (rows, cols) bf16 tile to a float tile stored transposed, (cols, rows). */
static void widen_transposed(float *dst, const uint16_t *src, int rows, int cols)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            dst[(size_t)c * rows + r] = bf16_to_float(src[(size_t)r * cols + c]);
}

/* out[j] = x · Yt[:, j] for j < n, with Yt a (len, n) tile stored column by column: each out[j]
 * is its own float32 sum over c in order, as one output of a tensor-core product (the loop over j
 * is the inner one, so a compiler can vectorise it without reordering any sum). */
static void row_times_tile(float *out, const float *x, const float *Yt, int len, int n)
{
    for (int j = 0; j < n; j++)
        out[j] = 0.0f;
    for (int c = 0; c < len; c++)
        for (int j = 0; j < n; j++)
            out[j] += x[c] * Yt[(size_t)c * n + j];
}

/* acc[c] += a * y[c] for c < len. */
static void add_scaled(float *acc, float a, const float *y, int len)
{
    for (int c = 0; c < len; c++)
        acc[c] += a * y[c];
}

/* bf16 inputs are the runner's job (runner_run makes them for a PRECISION_BF16 stage). */
static int need_bf16_inputs(const AttnProblem *p, int backward, FlError *err)
{
    if (p->q_bf16 && p->k_bf16 && p->v_bf16 && (!backward || p->dout_bf16))
        return FL_OK;
    return fl_fail(err, FL_BAD_INPUT, "stage 14 (hopper, cpu): no bf16 copies of the inputs; run it "
                   "through runner_run, which makes them");
}

/* ---- forward -------------------------------------------------------------------------------- */

/* One worker's on-chip tiles of the forward (the kernel's registers and shared memory). */
typedef struct {
    float *Q;  /* Q16_i (Br, d) */
    float *Kt; /* K16_j transposed (d, Bc) */
    float *V;  /* V16_j (Bc, dv) */
    float *S;  /* one row of S, then of P (Bc) */
    float *O;  /* the unnormalised accumulator O (Br, dv) */
    float *m, *l; /* running max (base 2) and sum of each row (Br) */
} FwdTiles;

static void fwd_tiles_free(FwdTiles *t)
{
    free(t->Q), free(t->Kt), free(t->V), free(t->S), free(t->O), free(t->m), free(t->l);
    memset(t, 0, sizeof *t);
}

static int fwd_tiles_alloc(FwdTiles *t, int d, int dv)
{
    const size_t Br = TC_FWD_BLOCK_R(d), Bc = TC_FWD_BLOCK_C;
    t->Q = malloc(Br * d * sizeof(float));
    t->Kt = malloc(Bc * d * sizeof(float));
    t->V = malloc(Bc * dv * sizeof(float));
    t->S = malloc(Bc * sizeof(float));
    t->O = malloc(Br * dv * sizeof(float));
    t->m = malloc(Br * sizeof(float));
    t->l = malloc(Br * sizeof(float));
    return t->Q && t->Kt && t->V && t->S && t->O && t->m && t->l;
}

/* One K/V tile (keys [j0, j0 + n)) into the running m, l, O of one row i of the block. */
static void fwd_row_tile(const AttnProblem *p, const FwdTiles *t, int r, int i, int j0, int n)
{
    const int d = p->d, dv = p->dv;
    const float scale_log2 = p->scale * LOG2E;
    const int seen = seen_in_tile(p, i, j0, n);
    float *s = t->S, *O = t->O + (size_t)r * dv;

    // S = Q16 K16^T, then s2 = S * scale * log2(e), -inf past the row's last key   (Bc)
    row_times_tile(s, t->Q + (size_t)r * d, t->Kt, d, n);
    float m_new = t->m[r];
    for (int j = 0; j < n; j++) {
        s[j] = j < seen ? s[j] * scale_log2 : -INFINITY;
        m_new = fmaxf(m_new, s[j]);
    }
    // alpha rescales what O and l hold from the earlier tiles; a row that has seen no key yet
    // (m_new = -inf) keeps alpha = 1 and exponentiates against 0, so that its masked P are
    // exp2(-inf) = 0 rather than exp2(-inf + inf) = NaN, while a NaN score (which the max passed
    // over) still gives a NaN P
    const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
    float alpha = m_new == -INFINITY ? 1.0f : exp2f(t->m[r] - m_new);
    if (TC_PLANTED_BUG == 1)
        alpha = 1.0f;
    // P = exp2(s2 - m_new) in float32; l sums it unrounded
    float row_sum = 0.0f;
    for (int j = 0; j < n; j++) {
        s[j] = exp2f(s[j] - m_ref);
        row_sum += s[j];
    }
    t->l[r] = alpha * t->l[r] + row_sum;
    // O = alpha O + bf16(P) V16   (dv), the sum over the keys the row sees in float32 (the masked
    // keys' P is 0 and adds nothing, but 0 · NaN would bring in a NaN value the row does not see)
    /* exercise: begin — O = alpha O + bf16(P) V16: rescale, then add the tile's keys with P rounded to bf16 (check 14: o and lse of the tc_* cases at the bf16 tolerance) | stub: (void)add_scaled; */
    for (int c = 0; c < dv; c++)
        O[c] *= alpha;
    for (int j = 0; j < seen; j++)
        add_scaled(O, bf16_round(s[j]), t->V + (size_t)j * dv, dv);
    /* exercise: end */
    t->m[r] = m_new;
}

/* FA2 forward of query rows [i0, i0 + rows) of query head h of batch b. */
static void fwd_block(const AttnProblem *p, AttnTensors *out, const FwdTiles *t, int b, int h, int i0,
                      int rows, HbmCounter *hbm)
{
    const int d = p->d, dv = p->dv, Tq = p->Tq, Tk = p->Tk;
    const size_t qh = (size_t)b * p->Hq + h;                    /* query head */
    const size_t kvh = (size_t)b * p->Hkv + h / (p->Hq / p->Hkv); /* the kv head it reads */
    const uint16_t *K16 = p->k_bf16 + kvh * Tk * d, *V16 = p->v_bf16 + kvh * Tk * dv;
    // The block's K/V walk ends at the last key its last row sees (rows of one head: the last
    // row sees the most); tiles past it are never loaded
    const int end = keys_seen(p, i0 + rows - 1);

    widen(t->Q, p->q_bf16 + (qh * Tq + i0) * d, (size_t)rows * d); /* Q16_i (rows, d) */
    hbm_count_read(hbm, (uint64_t)rows * d * 2);
    // m = -inf, l = 0, O = 0
    for (int r = 0; r < rows; r++) {
        t->m[r] = -INFINITY;
        t->l[r] = 0.0f;
    }
    memset(t->O, 0, (size_t)rows * dv * sizeof(float));

    for (int j0 = 0; j0 < end; j0 += TC_FWD_BLOCK_C) {
        const int n = min_int(TC_FWD_BLOCK_C, Tk - j0); /* the last tile may be short */
        widen_transposed(t->Kt, K16 + (size_t)j0 * d, n, d); /* K16_j (n, d), kept as (d, n) */
        widen(t->V, V16 + (size_t)j0 * dv, (size_t)n * dv);  /* V16_j (n, dv) */
        hbm_count_read(hbm, (uint64_t)n * (d + dv) * 2);
        for (int r = 0; r < rows; r++)
            fwd_row_tile(p, t, r, i0 + r, j0, n);
    }

    // o = O / l, lse = (m + log2 l) ln 2; a row that saw no key (l = 0): o = 0, lse = -inf. (A
    // NaN l is not 0: it comes through as NaN.)
    for (int r = 0; r < rows; r++) {
        const float l = t->l[r];
        float *o = out->o + (qh * Tq + i0 + r) * dv;
        for (int c = 0; c < dv; c++)
            o[c] = l == 0.0f ? 0.0f : t->O[(size_t)r * dv + c] / l;
        out->lse[qh * Tq + i0 + r] = l == 0.0f ? -INFINITY : (t->m[r] + log2f(l)) * LN2;
    }
    hbm_count_write(hbm, (uint64_t)rows * (dv + 1) * 4);
}

/* Workers that can be busy at once on `items` work items. */
static int worker_count(const RunCtx *ctx, size_t items)
{
    const int threads = ctx->threads > 0 ? ctx->threads : 1;
    return (size_t)threads < items ? threads : (int)(items ? items : 1);
}

static int tc_forward(const AttnProblem *p, AttnTensors *out, RunCtx *ctx, FlError *err)
{
    int rc = need_bf16_inputs(p, 0, err);
    if (rc != FL_OK)
        return rc;
    const int block_rows = TC_FWD_BLOCK_R(p->d);
    const int blocks = (p->Tq + block_rows - 1) / block_rows; /* query blocks per head */
    const size_t items = (size_t)p->B * p->Hq * blocks;        /* one thread block each */
    const int workers = worker_count(ctx, items);
    FwdTiles *tiles = calloc((size_t)workers, sizeof *tiles);
    int ok = tiles != NULL;
    for (int w = 0; ok && w < workers; w++)
        ok = fwd_tiles_alloc(&tiles[w], p->d, p->dv);
    if (ok) {
#pragma omp parallel for num_threads(workers) schedule(dynamic)
        for (long item = 0; item < (long)items; item++) {
            const int block = (int)(item % blocks), head = (int)(item / blocks);
            const int end = TC_FWD_BLOCK_END(p->Tq, p->d, block), i0 = end > block_rows ? end - block_rows : 0;
            fwd_block(p, out, &tiles[omp_get_thread_num()], head / p->Hq, head % p->Hq, i0, end - i0,
                      ctx->hbm);
        }
    }
    for (int w = 0; tiles && w < workers; w++)
        fwd_tiles_free(&tiles[w]);
    free(tiles);
    return ok ? FL_OK : fl_fail(err, FL_BAD_INPUT, "stage 14 (hopper, cpu): out of memory for the tiles");
}

/* ---- backward ------------------------------------------------------------------------------- */

/* One worker's on-chip tiles of the backward. */
typedef struct {
    float *K, *Kt; /* K16_j (Bc, d) for dQ, and transposed (d, Bc) for S */
    float *Vt;     /* V16_j transposed (dv, Bc) for dP */
    float *dK, *dV; /* the accumulators dK_j (Bc, d), dV_j (Bc, dv) */
    float *Q, *dO; /* Q16_i (Br, d), dO16_i (Br, dv) */
    float *P, *dS; /* (Br, Bc) */
    float *dQ;     /* one row of bf16(dS) K16_j (d) */
} BwdTiles;

static void bwd_tiles_free(BwdTiles *t)
{
    free(t->K), free(t->Kt), free(t->Vt), free(t->dK), free(t->dV);
    free(t->Q), free(t->dO), free(t->P), free(t->dS), free(t->dQ);
    memset(t, 0, sizeof *t);
}

static int bwd_tiles_alloc(BwdTiles *t, int d, int dv)
{
    const size_t Br = TC_BWD_BLOCK_R, Bc = TC_BWD_BLOCK_C(d);
    t->K = malloc(Bc * d * sizeof(float));
    t->Kt = malloc(Bc * d * sizeof(float));
    t->Vt = malloc(Bc * dv * sizeof(float));
    t->dK = malloc(Bc * d * sizeof(float));
    t->dV = malloc(Bc * dv * sizeof(float));
    t->Q = malloc(Br * d * sizeof(float));
    t->dO = malloc(Br * dv * sizeof(float));
    t->P = malloc(Br * Bc * sizeof(float));
    t->dS = malloc(Br * Bc * sizeof(float));
    t->dQ = malloc(d * sizeof(float));
    return t->K && t->Kt && t->Vt && t->dK && t->dV && t->Q && t->dO && t->P && t->dS && t->dQ;
}

/* D = rowsum(dO16 ∘ o) of every row (B Hq Tq), into the workspace; and dq = 0. */
static void bwd_prologue(const AttnProblem *p, AttnTensors *t, float *D, HbmCounter *hbm)
{
    const size_t rows = (size_t)p->B * p->Hq * p->Tq, dv = p->dv;
    for (size_t i = 0; i < rows; i++) {
        float sum = 0.0f;
        for (size_t c = 0; c < dv; c++)
            sum += bf16_to_float(p->dout_bf16[i * dv + c]) * t->o[i * dv + c];
        D[i] = sum;
    }
    hbm_count_read(hbm, rows * dv * (2 + 4)); /* dO16 (bf16) and o (float32) */
    hbm_count_write(hbm, rows * 4);           /* D */
    // dq = 0: the key tiles add into it
    memset(t->dq, 0, rows * p->d * sizeof(float));
    hbm_count_write(hbm, rows * p->d * 4);
}

/* One (query tile, key tile) step: rows [i0, i0 + rows) of query head qh (global index) against
 * keys [j0, j0 + n) of the worker's tiles. */
static void bwd_tile(const AttnProblem *p, AttnTensors *out, const float *D, const BwdTiles *t, size_t qh,
                     int i0, int rows, int j0, int n, HbmCounter *hbm)
{
    const int d = p->d, dv = p->dv, Tq = p->Tq;
    const float scale_log2 = p->scale * LOG2E;
    const size_t row0 = qh * Tq + i0; /* the tile's first row among all B Hq Tq rows */
    widen(t->Q, p->q_bf16 + row0 * d, (size_t)rows * d);        /* Q16_i  (rows, d) */
    widen(t->dO, p->dout_bf16 + row0 * dv, (size_t)rows * dv);  /* dO16_i (rows, dv) */
    hbm_count_read(hbm, (uint64_t)rows * ((d + dv) * 2 + 2 * 4)); /* Q16_i, dO16_i, lse_i, D_i */

    for (int r = 0; r < rows; r++) {
        const int seen = seen_in_tile(p, i0 + r, j0, n);
        const float lse2 = out->lse[row0 + r] * LOG2E;
        float *P = t->P + (size_t)r * n, *dS = t->dS + (size_t)r * n;
        // P = exp2(S * scale * log2(e) - lse * log2(e)), S = Q16 K16^T; 0 for masked keys
        row_times_tile(P, t->Q + (size_t)r * d, t->Kt, d, n);
        for (int j = 0; j < n; j++)
            P[j] = j < seen ? exp2f(P[j] * scale_log2 - lse2) : 0.0f;
        // dP = dO16 V16^T, then dS = P ∘ (dP - D) with the unrounded P
        row_times_tile(dS, t->dO + (size_t)r * dv, t->Vt, dv, n);
        const float Di = TC_PLANTED_BUG == 2 ? 0.0f : D[row0 + r];
        /* exercise: begin — dS = P ∘ (dP - D), row r (dS holds dP here) (check 14: dq and dk of the tc_* backward cases) | stub: (void)Di; */
        for (int j = 0; j < n; j++)
            dS[j] = P[j] * (dS[j] - Di);
        /* exercise: end */
    }
    // dV_j += bf16(P)^T dO16_i   (n, dv);   dK_j += bf16(dS)^T Q16_i   (n, d), over the pairs
    // the mask keeps: a masked P and dS are 0, but 0 · NaN would bring in a NaN the pair never sees
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < seen_in_tile(p, i0 + r, j0, n); j++) {
            add_scaled(t->dV + (size_t)j * dv, bf16_round(t->P[(size_t)r * n + j]), t->dO + (size_t)r * dv, dv);
            add_scaled(t->dK + (size_t)j * d, bf16_round(t->dS[(size_t)r * n + j]), t->Q + (size_t)r * d, d);
        }
    // dQ_i += scale * (bf16(dS) K16_j)   (rows, d): the share of each TC_BWD_WG_KEYS keys added
    // on its own, as the kernel adds them (a read-modify-write of dq in HBM each)
    for (int c0 = 0; c0 < n; c0 += TC_BWD_WG_KEYS) {
        const int c1 = min_int(c0 + TC_BWD_WG_KEYS, n);
        for (int r = 0; r < rows; r++) {
            memset(t->dQ, 0, (size_t)d * sizeof(float));
            const int seen = min_int(seen_in_tile(p, i0 + r, j0, n), c1);
            for (int j = c0; j < seen; j++)
                add_scaled(t->dQ, bf16_round(t->dS[(size_t)r * n + j]), t->K + (size_t)j * d, d);
            float *dq = out->dq + (row0 + r) * d;
            for (int c = 0; c < d; c++)
                dq[c] += p->scale * t->dQ[c];
        }
        hbm_count_read(hbm, (uint64_t)rows * d * 4);
        hbm_count_write(hbm, (uint64_t)rows * d * 4);
    }
}

/* Every key tile of kv head g of batch b (one thread block each on the GPU), in order. */
static void bwd_kv_head(const AttnProblem *p, AttnTensors *out, const float *D, const BwdTiles *t, int b,
                        int g, HbmCounter *hbm)
{
    const int d = p->d, dv = p->dv, Tk = p->Tk, Tq = p->Tq, group = p->Hq / p->Hkv;
    const size_t kvh = (size_t)b * p->Hkv + g;
    for (int j0 = 0; j0 < Tk; j0 += TC_BWD_BLOCK_C(d)) {
        const int n = min_int(TC_BWD_BLOCK_C(d), Tk - j0);
        const uint16_t *K16 = p->k_bf16 + (kvh * Tk + j0) * d, *V16 = p->v_bf16 + (kvh * Tk + j0) * dv;
        widen(t->K, K16, (size_t)n * d);           /* K16_j (n, d) */
        widen_transposed(t->Kt, K16, n, d);        /* and as (d, n) */
        widen_transposed(t->Vt, V16, n, dv);       /* V16_j as (dv, n) */
        hbm_count_read(hbm, (uint64_t)n * (d + dv) * 2);
        memset(t->dK, 0, (size_t)n * d * sizeof(float));
        memset(t->dV, 0, (size_t)n * dv * sizeof(float));
        // Every query tile of every head of the group whose last row sees key j0
        for (int h = g * group; h < (g + 1) * group; h++)
            for (int i0 = 0; i0 < Tq; i0 += TC_BWD_BLOCK_R) {
                const int rows = min_int(TC_BWD_BLOCK_R, Tq - i0);
                if (keys_seen(p, i0 + rows - 1) > j0)
                    bwd_tile(p, out, D, t, (size_t)b * p->Hq + h, i0, rows, j0, n, hbm);
            }
        // dK_j *= scale; store dK_j, dV_j (float32)
        float *dk = out->dk + (kvh * Tk + j0) * d, *dvo = out->dv + (kvh * Tk + j0) * dv;
        for (int k = 0; k < n * d; k++)
            dk[k] = p->scale * t->dK[k];
        memcpy(dvo, t->dV, (size_t)n * dv * sizeof(float));
        hbm_count_write(hbm, (uint64_t)n * (d + dv) * 4);
    }
}

static int tc_backward(const AttnProblem *p, AttnTensors *out, RunCtx *ctx, FlError *err)
{
    int rc = need_bf16_inputs(p, 1, err);
    if (rc != FL_OK)
        return rc;
    float *D = ctx->workspace; /* (B, Hq, Tq) */
    const size_t heads = (size_t)p->B * p->Hkv;
    const int workers = worker_count(ctx, heads);
    BwdTiles *tiles = calloc((size_t)workers, sizeof *tiles);
    int ok = tiles != NULL;
    for (int w = 0; ok && w < workers; w++)
        ok = bwd_tiles_alloc(&tiles[w], p->d, p->dv);
    if (ok) {
        bwd_prologue(p, out, D, ctx->hbm);
        // One work item per kv head: its key tiles and its group's dq rows belong to one worker
#pragma omp parallel for num_threads(workers) schedule(dynamic)
        for (long kv = 0; kv < (long)heads; kv++)
            bwd_kv_head(p, out, D, &tiles[omp_get_thread_num()], (int)(kv / p->Hkv), (int)(kv % p->Hkv),
                        ctx->hbm);
    }
    for (int w = 0; tiles && w < workers; w++)
        bwd_tiles_free(&tiles[w]);
    free(tiles);
    return ok ? FL_OK : fl_fail(err, FL_BAD_INPUT, "stage 14 (hopper, cpu): out of memory for the tiles");
}

/* D = rowsum(dO ∘ o), B Hq Tq floats, in the backward; nothing in the forward. */
static size_t tc_workspace_bytes(const AttnProblem *p, const RunCtx *ctx, Direction dir)
{
    (void)ctx;
    return dir == DIR_BWD ? (size_t)p->B * p->Hq * p->Tq * sizeof(float) : 0;
}

static const StageImpl reference = {
    .stage = "14",
    .name = "hopper",
    .variant = "",
    .device = DEVICE_CPU,
    .lesson = "CPU reference of the tensor-core arithmetic: bf16 inputs, P and dS rounded where the kernel "
              "rounds them, float32 sums",
    .features = FEAT_BACKWARD | FEAT_CAUSAL | FEAT_GQA,
    .forward = tc_forward,
    .backward = tc_backward,
    .workspace_bytes = tc_workspace_bytes,
    .precision = PRECISION_BF16,
    .head_dims = {64, 128},
};

const StageImpl *const stage14_hopper_cpu[] = {&reference, NULL};
