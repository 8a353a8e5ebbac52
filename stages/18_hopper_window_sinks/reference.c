/* stages/18_hopper_window_sinks/reference.c — the CPU reference of stage 18: stage 14's bf16
 * arithmetic on stage 14's Hopper tiles, with stage 15's sliding window, sink tokens and learned
 * sink logits. The kernels (hopper_window_sinks.cu) are held to it: the same rounding points, the
 * same key tiles walked in the same order, the same bytes counted.
 *
 * The rounding points are stage 12's (common/bf16.h, round to nearest even):
 *   Q16, K16, V16, dO16   the inputs, rounded once by the runner (AttnProblem.q_bf16, ...)
 *   bf16(P)               before P V (forward) and before P^T dO (backward); l sums the unrounded P
 *   bf16(dS)              before dS K (dQ) and dS^T Q (dK)
 * Everything else is float32: S, m, l, O, D, dP, dS, the sink terms, dsinks and the outputs. The
 * learned sink logits s_h enter no matrix product and stay float32.
 *
 * The tiles are the kernels' (tiles.h): the rounding of P depends on the running max, which
 * changes at the end of every K/V tile, so the reference walks the keys in the same tiles of
 * TC_FWD_BLOCK_C = 64 in the forward (stage 14: 128). The online softmax runs in base 2, as on the
 * GPU: s2 = S * scale * log2(e).
 *
 * What stage 18 adds to stage 14 is stage 15's feature, fitted to these tiles:
 *   the mask   row i of a head sits at position p = i + Tk - Tq and sees two runs of keys, the
 *              band [p + 1 - W, p + 1) and the sink tokens [0, min(S, p + 1)) (tc_row_runs). The
 *              keys a row sees in a tile are no longer a prefix of it: each key is tested
 *              (tc_sees), the ones between the sinks and the band are masked too.
 *   the walk   a forward block loads its sink tiles, then the band tiles from the one holding its
 *              first row's lowest key up to its last row's last key (tc_fwd_walk; the tiles
 *              between never), about (S + W + Br) / 64 tiles rather than p / 64. A backward key
 *              block is loaded only when some row sees one of its keys, and visits only the query
 *              tiles holding such a row (tc_rows_seeing): positions [j0, j0 + Bc - 1 + W), all the
 *              later ones when the block holds a sink token.
 *   the sink   s_h joins each row's denominator once, after the walk (s2 = s_h log2 e):
 *                m' = max(m, s2),  l' = exp2(m - m') l + exp2(s2 - m'),  o = exp2(m - m') O / l'
 *              The walk, its running max and its rounding of P are untouched; lse = (m' + log2 l')
 *              ln 2 includes the sink, so the backward's P needs no change, and the pass that
 *              forms D = rowsum(dO16 ∘ o) also sums, in float32,
 *                dsinks_h = -sum over (b, i) of P_sink D,   P_sink = exp2(s2 - lse log2 e)
 *              (the sink's dP is 0, its dS -P_sink D: docs/conventions.md, "Backward pass").
 *   dq shares  each TC_BWD_WG_KEYS = 64 keys of a key block (one consumer warpgroup's) add their
 *              own share of dQ into dq, as in stage 14; a share none of whose keys a row of the
 *              query tile sees is skipped whole: it adds nothing and reads and writes no dq (the
 *              warpgroup skips that step). Under stage 14's causal mask every share of a visited
 *              query tile was added.
 *
 * Forward, per (b, h) and query block Q_i of TC_FWD_BLOCK_R(d) rows (one thread block's rows: 192
 * at d = 64, 128 at d = 128; cut from the head's last row back, TC_FWD_BLOCK_END):
 *   load Q16_i;  m = -inf, l = 0, O = 0
 *   for each K/V tile j (TC_FWD_BLOCK_C keys) of the block's walk (sink tiles, then band):
 *     load K16_j, V16_j
 *     S   = Q16_i K16_j^T                          (Br, Bc)   float32 sums
 *     s2  = S * scale * log2(e), -inf for the keys a row does not see
 *     m_new = max(m, rowmax s2);  alpha = exp2(m - m_new)   (1 while m_new = -inf)
 *     P   = exp2(s2 - m_new)                        (Br, Bc)   float32, shifted by 0 while m_new = -inf
 *     l   = alpha l + rowsum(P)                     unrounded P
 *     O   = alpha O + bf16(P) V16_j                 (Br, dv)   over the keys the row sees
 *     m   = m_new
 *   the sink joins: m', l' as above;  o = exp2(m - m') O / l' (0 for a row that sees no key),
 *   lse = (m' + log2 l') ln 2 (-inf when l' = 0);  store o, lse
 *
 * Backward, with D = rowsum(dO16 ∘ o) and the dsinks sums first (o and lse the forward's), then per
 * (b, kv head) and key block K16_j, V16_j of TC_BWD_BLOCK_C(d) keys (one thread block of the
 * kernel: 192 at d = 64, 128 at d = 128):
 *   dK_j = 0, dV_j = 0
 *   for every query head of the group, for each query tile Q_i of TC_BWD_BLOCK_R = 64 rows that
 *   holds a row seeing a key of the block (tc_rows_seeing; the others are skipped):
 *     load Q16_i, dO16_i, lse_i, D_i
 *     P    = exp2(S * scale * log2(e) - lse * log2(e))   (Br, Bc)  0 for masked keys
 *     dV_j += bf16(P)^T dO16_i                 (Bc, dv)
 *     dP   = dO16_i V16_j^T                     (Br, Bc)
 *     dS   = P ∘ (dP - D_i)                     (Br, Bc)  unrounded P
 *     dK_j += bf16(dS)^T Q16_i                  (Bc, d)
 *     dQ_i += scale * (bf16(dS) K16_j)           (Br, d)   read-modify-write of dq in HBM, once
 *                                                  per TC_BWD_WG_KEYS keys some row of Q_i sees
 *   dK_j *= scale;  store dK_j, dV_j   (a key block no row sees loads nothing and stores zeros)
 * The GPU adds into dQ (and dsinks) with atomics in whatever order its blocks finish; here one
 * worker owns a kv head and its group's dq rows, and adds the key blocks in order.
 *
 * HBM bytes are counted where the kernels count them and at their sizes: bf16 inputs 2 bytes an
 * element, float32 outputs, lse, D, dq, sinks and dsinks 4 bytes (docs/hbm_model.md, "Stage 18").
 * The forward's sink logit is one scalar per block, like the scale, and is not counted. The tiles
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

#define LOG2E 1.4426950408889634f /* log2(e) */
#define LN2 0.6931471805599453f   /* ln(2) */

static int min_int(int a, int b) { return a < b ? a : b; }

/* The mask of a problem (tiles.h, the rule the kernels use). */
static TcMask mask_of(const AttnProblem *p)
{
    TcMask m = {p->causal || p->window > 0, p->Tq, p->Tk, p->window, p->sink_tokens};
    return m;
}

/* The runs of keys row i of a head sees. Inside a tile they need not be a prefix of its keys, as
 * they were under stage 14's causal mask: the keys between the sink tokens and the band are
 * masked too (tc_sees). */
static TcRuns runs_of(const AttnProblem *p, int i) { return tc_row_runs(mask_of(p), i); }

/* Does some row of [i0, i0 + rows) see some key of [j0, j0 + n)? tc_rows_seeing gives every row
 * of the head that does, one run of them; it must meet the given rows. */
static int rows_see_keys(const AttnProblem *p, int i0, int rows, int j0, int n)
{
    int first, end;
    tc_rows_seeing(mask_of(p), j0, n, &first, &end);
    return (first > i0 ? first : i0) < min_int(end, i0 + rows);
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
    return fl_fail(err, FL_BAD_INPUT, "stage 18 (hopper_window_sinks, cpu): no bf16 copies of the inputs; run it "
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
    const TcRuns runs = runs_of(p, i);
    float *s = t->S, *O = t->O + (size_t)r * dv;

    // S = Q16 K16^T, then s2 = S * scale * log2(e), -inf for the keys outside the row's runs   (Bc)
    row_times_tile(s, t->Q + (size_t)r * d, t->Kt, d, n);
    float m_new = t->m[r];
    for (int j = 0; j < n; j++) {
        s[j] = tc_sees(runs, j0 + j) ? s[j] * scale_log2 : -INFINITY;
        m_new = fmaxf(m_new, s[j]);
    }
    // alpha rescales what O and l hold from the earlier tiles; a row that has seen no key yet
    // (m_new = -inf) keeps alpha = 1 and exponentiates against 0, so that its masked P are
    // exp2(-inf) = 0 rather than exp2(-inf + inf) = NaN, while a NaN score (which the max passed
    // over) still gives a NaN P
    const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
    float alpha = m_new == -INFINITY ? 1.0f : exp2f(t->m[r] - m_new);
    // P = exp2(s2 - m_new) in float32; l sums it unrounded
    float row_sum = 0.0f;
    for (int j = 0; j < n; j++) {
        s[j] = exp2f(s[j] - m_ref);
        row_sum += s[j];
    }
    t->l[r] = alpha * t->l[r] + row_sum;
    // O = alpha O + bf16(P) V16   (dv), the sum over the keys the row sees in float32 (the masked
    // keys' P is 0 and adds nothing, but 0 · NaN would bring in a NaN value the row does not see)
    for (int c = 0; c < dv; c++)
        O[c] *= alpha;
    for (int j = 0; j < n; j++)
        if (tc_sees(runs, j0 + j))
            add_scaled(O, bf16_round(s[j]), t->V + (size_t)j * dv, dv);
    t->m[r] = m_new;
}

/* The learned sink joins one row's softmax after its band walk: one more term exp2(s2) with a zero
 * value row, s2 = s_h log2(e). With the row's running max m and sum l (base 2),
 *   m' = max(m, s2),   l' = exp2(m - m') l + exp2(s2 - m')
 * and the factor exp2(m - m') that O must take to share l's new reference, returned. m and l
 * become m', l'. Shifting by 0 when m' = -inf (no key and no sink: sink -inf) keeps l' = 0, not
 * NaN; a NaN sink, which fmaxf passes over, still makes l' NaN. */
static float join_sink(float *m, float *l, float s2)
{
    /* exercise: begin — the learned sink joins the softmax of one row, after its band walk: m' = max(m, s2), l' = exp2(m - m') l + exp2(s2 - m') with a shift of 0 when m' = -inf, and return exp2(m - m'), the factor O takes; m and l become m' and l' (check 18: o and lse of the tc_*sinks* cases) | stub: (void)s2; return 1.0f; */
    const float m_new = fmaxf(*m, s2);
    const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
    const float o_scale = exp2f(*m - m_ref);
    *l = o_scale * *l + exp2f(s2 - m_ref);
    *m = m_new;
    return o_scale;
    /* exercise: end */
}

/* FA2 forward of query rows [i0, i0 + rows) of query head h of batch b. */
static void fwd_block(const AttnProblem *p, AttnTensors *out, const FwdTiles *t, int b, int h, int i0,
                      int rows, HbmCounter *hbm)
{
    const int d = p->d, dv = p->dv, Tq = p->Tq, Tk = p->Tk;
    const size_t qh = (size_t)b * p->Hq + h;                    /* query head */
    const size_t kvh = (size_t)b * p->Hkv + h / (p->Hq / p->Hkv); /* the kv head it reads */
    const uint16_t *K16 = p->k_bf16 + kvh * Tk * d, *V16 = p->v_bf16 + kvh * Tk * dv;
    // The block's K/V walk: the sink tiles, then the band from the tile holding the first row's
    // lowest key to the last row's last key (rows of one head: the first row's band starts
    // lowest, the last row's ends highest); the tiles between and past them are never loaded
    const TcWalk walk = tc_fwd_walk(runs_of(p, i0), runs_of(p, i0 + rows - 1));

    widen(t->Q, p->q_bf16 + (qh * Tq + i0) * d, (size_t)rows * d); /* Q16_i (rows, d) */
    hbm_count_read(hbm, (uint64_t)rows * d * 2);
    // m = -inf, l = 0, O = 0
    for (int r = 0; r < rows; r++) {
        t->m[r] = -INFINITY;
        t->l[r] = 0.0f;
    }
    memset(t->O, 0, (size_t)rows * dv * sizeof(float));

    for (int k = 0; k < walk.steps; k++) {
        const int j0 = tc_walk_tile(walk, k) * TC_FWD_BLOCK_C;
        const int n = min_int(TC_FWD_BLOCK_C, Tk - j0); /* the last tile may be short */
        widen_transposed(t->Kt, K16 + (size_t)j0 * d, n, d); /* K16_j (n, d), kept as (d, n) */
        widen(t->V, V16 + (size_t)j0 * dv, (size_t)n * dv);  /* V16_j (n, dv) */
        hbm_count_read(hbm, (uint64_t)n * (d + dv) * 2);
        for (int r = 0; r < rows; r++)
            fwd_row_tile(p, t, r, i0 + r, j0, n);
    }

    // The learned sink joins the denominator (o_scale: what the sink's max does to O), then
    // o = o_scale O / l, lse = (m + log2 l) ln 2. A row that saw no key has O = 0: o = 0, and
    // lse = -inf without sinks (l = 0), s_h with them (l = 1). (A NaN l is not 0: it comes
    // through as NaN.)
    const float sink2 = p->sinks ? p->sinks[h] * LOG2E : -INFINITY;
    for (int r = 0; r < rows; r++) {
        float m = t->m[r], l = t->l[r];
        const float o_scale = p->sinks ? join_sink(&m, &l, sink2) : 1.0f;
        const int sees_none = tc_visible(runs_of(p, i0 + r)) == 0;
        float *o = out->o + (qh * Tq + i0 + r) * dv;
        for (int c = 0; c < dv; c++)
            o[c] = l == 0.0f || sees_none ? 0.0f : o_scale * t->O[(size_t)r * dv + c] / l;
        out->lse[qh * Tq + i0 + r] = l == 0.0f ? -INFINITY : (m + log2f(l)) * LN2;
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
    return ok ? FL_OK : fl_fail(err, FL_BAD_INPUT, "stage 18 (hopper_window_sinks, cpu): out of memory for the tiles");
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

/* Row `row` (of all B Hq Tq) adds its share to the learned sink's gradient of its head h:
 * dsinks_h -= P_sink D, P_sink = exp2(s_h log2(e) - lse log2(e)), the sink's weight in the row's
 * softmax (lse includes the sink, so a row that sees no key has P_sink = 1 and D = 0). */
static void add_sink_gradient(const AttnProblem *p, AttnTensors *t, size_t row, float Di)
{
    const int h = (int)(row / (size_t)p->Tq % (size_t)p->Hq);
    /* exercise: begin — dsinks: row `row` of head h adds -P_sink D to dsinks_h, with P_sink = exp2(s_h log2(e) - lse log2(e)) from the forward's lse, in float32 (check 18: dsinks.npy of the tc_*sinks* backward cases) | stub: (void)h, (void)Di; */
    const float P_sink = exp2f(p->sinks[h] * LOG2E - t->lse[row] * LOG2E);
    t->dsinks[h] -= P_sink * Di;
    /* exercise: end */
}

/* D = rowsum(dO16 ∘ o) of every row (B Hq Tq), into the workspace, and with learned sinks their
 * gradient from the same pass (it reads lse beside dO16 and o); and dq = 0. D is 0 for a row that
 * sees no key: its o is 0 and it adds nothing, not even to dsinks, whatever its dO holds (a NaN
 * there must not reach dsinks). */
static void bwd_prologue(const AttnProblem *p, AttnTensors *t, float *D, HbmCounter *hbm)
{
    const size_t rows = (size_t)p->B * p->Hq * p->Tq, dv = p->dv, Hq = (size_t)p->Hq;
    for (size_t h = 0; p->sinks && h < Hq; h++)
        t->dsinks[h] = 0.0f;
    for (size_t i = 0; i < rows; i++) {
        float sum = 0.0f;
        for (size_t c = 0; tc_visible(runs_of(p, (int)(i % (size_t)p->Tq))) > 0 && c < dv; c++)
            sum += bf16_to_float(p->dout_bf16[i * dv + c]) * t->o[i * dv + c];
        D[i] = sum;
        if (p->sinks)
            add_sink_gradient(p, t, i, sum);
    }
    hbm_count_read(hbm, rows * dv * (2 + 4)); /* dO16 (bf16) and o (float32) */
    hbm_count_write(hbm, rows * 4);           /* D */
    if (p->sinks) {
        hbm_count_read(hbm, rows * 4 + Hq * 4); /* lse, and the sink logits once */
        hbm_count_write(hbm, Hq * 4);           /* dsinks once */
    }
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
        const TcRuns runs = runs_of(p, i0 + r);
        const float lse2 = out->lse[row0 + r] * LOG2E;
        float *P = t->P + (size_t)r * n, *dS = t->dS + (size_t)r * n;
        // P = exp2(S * scale * log2(e) - lse * log2(e)), S = Q16 K16^T; 0 for masked keys
        row_times_tile(P, t->Q + (size_t)r * d, t->Kt, d, n);
        for (int j = 0; j < n; j++)
            P[j] = tc_sees(runs, j0 + j) ? exp2f(P[j] * scale_log2 - lse2) : 0.0f;
        // dP = dO16 V16^T, then dS = P ∘ (dP - D) with the unrounded P
        row_times_tile(dS, t->dO + (size_t)r * dv, t->Vt, dv, n);
        const float Di = D[row0 + r];
        for (int j = 0; j < n; j++)
            dS[j] = P[j] * (dS[j] - Di);
    }
    // dV_j += bf16(P)^T dO16_i   (n, dv);   dK_j += bf16(dS)^T Q16_i   (n, d), over the pairs
    // the mask keeps: a masked P and dS are 0, but 0 · NaN would bring in a NaN the pair never sees
    for (int r = 0; r < rows; r++) {
        const TcRuns runs = runs_of(p, i0 + r);
        for (int j = 0; j < n; j++) {
            if (!tc_sees(runs, j0 + j))
                continue;
            add_scaled(t->dV + (size_t)j * dv, bf16_round(t->P[(size_t)r * n + j]), t->dO + (size_t)r * dv, dv);
            add_scaled(t->dK + (size_t)j * d, bf16_round(t->dS[(size_t)r * n + j]), t->Q + (size_t)r * d, d);
        }
    }
    // dQ_i += scale * (bf16(dS) K16_j)   (rows, d): the share of each TC_BWD_WG_KEYS keys added
    // on its own, as the kernel adds them (a read-modify-write of dq in HBM each); a share whose
    // keys no row of the tile sees is skipped, as its warpgroup skips the step
    for (int c0 = 0; c0 < n; c0 += TC_BWD_WG_KEYS) {
        const int c1 = min_int(c0 + TC_BWD_WG_KEYS, n);
        if (!rows_see_keys(p, i0, rows, j0 + c0, c1 - c0))
            continue;
        for (int r = 0; r < rows; r++) {
            const TcRuns runs = runs_of(p, i0 + r);
            memset(t->dQ, 0, (size_t)d * sizeof(float));
            for (int j = c0; j < c1; j++)
                if (tc_sees(runs, j0 + j))
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
        // The query rows [first, end) of each head that see a key of the tile: the rows from the
        // diagonal to where the band leaves the tile (to the end when it holds a sink token)
        int first, end;
        tc_rows_seeing(mask_of(p), j0, n, &first, &end);
        memset(t->dK, 0, (size_t)n * d * sizeof(float));
        memset(t->dV, 0, (size_t)n * dv * sizeof(float));
        if (first < end) { /* a tile no row sees is never loaded: its dK_j, dV_j are 0 */
            const uint16_t *K16 = p->k_bf16 + (kvh * Tk + j0) * d, *V16 = p->v_bf16 + (kvh * Tk + j0) * dv;
            widen(t->K, K16, (size_t)n * d);     /* K16_j (n, d) */
            widen_transposed(t->Kt, K16, n, d);  /* and as (d, n) */
            widen_transposed(t->Vt, V16, n, dv); /* V16_j as (dv, n) */
            hbm_count_read(hbm, (uint64_t)n * (d + dv) * 2);
        }
        // The query tiles of every head of the group that hold one of those rows
        for (int h = g * group; first < end && h < (g + 1) * group; h++)
            for (int i0 = first / TC_BWD_BLOCK_R * TC_BWD_BLOCK_R; i0 < end; i0 += TC_BWD_BLOCK_R)
                bwd_tile(p, out, D, t, (size_t)b * p->Hq + h, i0, min_int(TC_BWD_BLOCK_R, Tq - i0), j0, n, hbm);
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
    return ok ? FL_OK : fl_fail(err, FL_BAD_INPUT, "stage 18 (hopper_window_sinks, cpu): out of memory for the tiles");
}

/* D = rowsum(dO ∘ o), B Hq Tq floats, in the backward; nothing in the forward. */
static size_t tc_workspace_bytes(const AttnProblem *p, const RunCtx *ctx, Direction dir)
{
    (void)ctx;
    return dir == DIR_BWD ? (size_t)p->B * p->Hq * p->Tq * sizeof(float) : 0;
}

static const StageImpl reference = {
    .stage = "18",
    .name = "hopper_window_sinks",
    .variant = "",
    .device = DEVICE_CPU,
    .lesson = "CPU reference of bf16 sliding window + sink tokens + learned sinks on Hopper's tiles: only the "
              "band and sink tiles, the sink joins l after the walk, dsinks from the D pass",
    .features = FEAT_BACKWARD | FEAT_CAUSAL | FEAT_GQA | FEAT_WINDOW | FEAT_SINK_TOKENS | FEAT_SINKS,
    .forward = tc_forward,
    .backward = tc_backward,
    .workspace_bytes = tc_workspace_bytes,
    .precision = PRECISION_BF16,
    .head_dims = {64, 128},
};

const StageImpl *const stage18_hopper_window_sinks_cpu[] = {&reference, NULL};
