/* stages/16_tc_decode/reference.c — the CPU reference of stage 16: stage 11's split-KV decode over a
 * paged KV cache, in stage 12's bf16 tensor-core arithmetic. It fixes what the kernel
 * (tc_decode.cu) has to match: the arithmetic, the rounding
 * points, the tiles it walks (tiles.h) and the bytes it counts.
 *
 * The rounding points are stage 12's (common/bf16.h, round to nearest even):
 *   Q16, K16, V16   the inputs: q and the two page pools, rounded once by the runner
 *                   (AttnProblem.q_bf16, k_bf16, v_bf16)
 *   bf16(P)         before P V; l sums the unrounded P
 * Everything else is float32: S, m, l, O, the merges of the warps and of the splits, the learned
 * sink logits (they never enter a matrix product).
 *
 * New in stage 16, the work item on tensor cores (tiles.h). Stage 11's work item, one split of the
 * keys one query block of a kv head sees, now holds the block's packed rows (the group's query
 * heads times Tq, stage 08) as an MMA's M, 16 or 32 of them (tcd_block_rows), and TCD_WARPS warps
 * walk the split's keys in turns, each with its own running max, sum and O:
 *   load Q16_i (Br packed rows);  m_w = -inf, l_w = 0, O_w = 0 for each warp w
 *   for each tile t of the split (TCD_BLOCK_C keys of the span), walked by warp w = t mod TCD_WARPS:
 *     gather K16_t, V16_t through the block table
 *     S   = Q16_i K16_t^T                  (Br, Bc)  float32 sums over d
 *     s2  = S scale log2(e), -inf where the row does not see the key
 *     m_new = max(m_w, rowmax s2);  alpha = exp2(m_w - m_new)   (shifted by 0 while m_new = -inf)
 *     P   = exp2(s2 - m_new);  l_w = alpha l_w + rowsum P;  O_w = alpha O_w + bf16(P) V16_t;  m_w = m_new
 *   merge the warps (and, in split 0, the learned sink logit s2_h = s_h log2(e), with a zero value):
 *     m = max(m_w, s2_h),  l = sum_w exp2(m_w - m) l_w + exp2(s2_h - m),  O = sum_w exp2(m_w - m) O_w
 *   O_s = O / l,  lse_s = (m + log2 l) ln 2   (O_s = 0, lse_s = -inf for a split that saw nothing)
 * then stage 11's combine of the splits by their lse. With one split the item writes o and lse.
 * The warps never share a key: a decode step reads each key once and does two multiply-adds per
 * byte, so the kernel streams a tile per warp rather than splitting one tile's work between warps.
 *
 * HBM bytes are counted where the kernel counts them and at its sizes (docs/hbm_model.md,
 * "Stage 16"): Q16, K16, V16 2 bytes an element, the block-table entries and seq_lens 4 bytes, the
 * partials, o and lse float32; each work item reads Q16 of its rows once, and each tile its K16 and
 * V16 rows and the block-table entries of the pages they lie in. The learned sink logit is one
 * scalar per row, like the scale, and is not counted. The tiles below stand for the kernel's
 * registers and shared memory; the workspace holds the partials when there is more than one split. */

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

#include "attn.h"
#include "bf16.h"
#include "hbm.h"
#include "mask.h"
#include "paged.h"
#include "tiles.h"

#define LOG2E 1.4426950408889634f /* log2(e) */
#define LN2 0.6931471805599453f   /* ln(2) */

static int min_int(int a, int b) { return a < b ? a : b; }

/* The mask of sequence b: its own length, its queries at its end. */
static Causal mask_of(const AttnProblem *p, int b)
{
    return causal_make(p->causal, p->Tq, seq_keys(p, b), p->window, p->sink_tokens);
}

/* Splits: ctx->splits, or split_count (paged.h) with the worker threads as the units to fill and
 * every split at least TCD_MIN_SPLIT_KEYS keys long (the kernel fills the GPU's blocks instead). */
static int split_plan(const AttnProblem *p, const RunCtx *ctx)
{
    if (ctx->splits > 0)
        return ctx->splits;
    const int Br = tcd_block_rows(packed_rows(p));
    return split_count(query_blocks(p, Br), ctx->threads > 0 ? ctx->threads : 1, longest_span(p),
                       TCD_MIN_SPLIT_KEYS);
}

/* The partials live in the workspace only when there is more than one split. */
static size_t tcd_workspace_bytes(const AttnProblem *p, const RunCtx *ctx, Direction dir)
{
    (void)dir;
    return partials_bytes(p, split_plan(p, ctx));
}

/* One warp's state: running max (base 2), unnormalised sum and Õ of each of the block's rows. */
typedef struct {
    float m[32], l[32];
    float *O; /* (Br, dv) */
} WarpState;

/* One worker's tiles (the kernel's registers and shared memory). */
typedef struct {
    float *Q;          /* Q16_i widened  (Br, d) */
    float *K, *V;      /* K16_t, V16_t widened  (Bc, d), (Bc, dv) */
    float *S;          /* scores, then P  (Br, Bc) */
    WarpState warp[TCD_WARPS];
} Tiles;

static void tiles_free(Tiles *s)
{
    free(s->Q), free(s->K), free(s->V), free(s->S);
    for (int w = 0; w < TCD_WARPS; w++)
        free(s->warp[w].O);
}

static int tiles_alloc(const AttnProblem *p, int Br, Tiles *s)
{
    *s = (Tiles){0};
    s->Q = malloc((size_t)Br * p->d * sizeof(float));
    s->K = malloc((size_t)TCD_BLOCK_C * p->d * sizeof(float));
    s->V = malloc((size_t)TCD_BLOCK_C * p->dv * sizeof(float));
    s->S = malloc((size_t)Br * TCD_BLOCK_C * sizeof(float));
    int ok = s->Q && s->K && s->V && s->S;
    for (int w = 0; w < TCD_WARPS; w++)
        ok &= (s->warp[w].O = malloc((size_t)Br * p->dv * sizeof(float))) != NULL;
    if (!ok)
        tiles_free(s);
    return ok;
}

/* Widens n bf16 values to float (exact: a bf16 is the top half of a float). */
static void widen(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = bf16_to_float(src[i]);
}

/* Gathers keys [k0, k0 + n) of a span (numbered across its runs) of kv head kvh of sequence b into
 * the K and V tiles, one row at a time through the block table, counting K16 and V16 rows and the
 * block-table entry of each page the tile's keys lie in (consecutive keys share one). */
static void load_keys(const AttnProblem *p, int b, int kvh, KeySpan span, int k0, int n, const Tiles *s,
                      HbmCounter *hbm)
{
    const uint16_t *k16 = p->k_bf16, *v16 = p->v_bf16;
    int last_page = -1;
    uint64_t pages = 0;
    for (int j = 0; j < n; j++) {
        const int key = span_key(span, k0 + j);
        widen(s->K + (size_t)j * p->d, k16 + kv_offset(p, b, kvh, key, p->d), (size_t)p->d);
        widen(s->V + (size_t)j * p->dv, v16 + kv_offset(p, b, kvh, key, p->dv), (size_t)p->dv);
        if (p->page_size > 0 && page_of(p, b, key) != last_page) {
            last_page = page_of(p, b, key);
            pages++;
        }
    }
    hbm_count_read(hbm, (uint64_t)n * (p->d + p->dv) * sizeof(uint16_t) + pages * sizeof(int32_t));
}

/* One tile of warp state w: S = Q16 K16^T (float32 sums over d, in order), the mask, the online
 * softmax in base 2, and O += bf16(P) V16 over the keys each row sees (a masked key is skipped, so
 * a NaN in a slot a row does not see never reaches it). */
static void tile_step(const AttnProblem *p, Causal causal, KeySpan span, int i0, int rows, int k0, int n,
                      const Tiles *s, WarpState *w)
{
    const int d = p->d, dv = p->dv;
    const float scale_log2 = p->scale * LOG2E;
    for (int i = 0; i < rows; i++) {
        const KeyRuns runs = row_runs(causal, i0 + i);
        float *srow = s->S + (size_t)i * TCD_BLOCK_C;
        float m_new = w->m[i];
        for (int j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int c = 0; c < d; c++)
                acc += s->Q[(size_t)i * d + c] * s->K[(size_t)j * d + c];
            srow[j] = sees(runs, span_key(span, k0 + j)) ? acc * scale_log2 : -INFINITY;
            m_new = fmaxf(m_new, srow[j]);
        }
        const float m_ref = m_new == -INFINITY ? 0.0f : m_new; /* no key seen yet: P and alpha are 0 */
        const float alpha = exp2f(w->m[i] - m_ref);
        float *o = w->O + (size_t)i * dv;
        for (int c = 0; c < dv; c++)
            o[c] *= alpha;
        float sum = 0.0f;
        for (int j = 0; j < n; j++) {
            const float pij = exp2f(srow[j] - m_ref);
            sum += pij;
            if (srow[j] == -INFINITY)
                continue;
            const float p16 = bf16_round(pij); /* the rounding point of P V */
            for (int c = 0; c < dv; c++)
                o[c] += p16 * s->V[(size_t)j * dv + c];
        }
        w->l[i] = w->l[i] * alpha + sum;
        w->m[i] = m_new;
    }
}

/* Row i of the warps merged by their maxima, with the learned sink logit s2 (base 2; -inf for
 * none) as one more term of value 0: writes O_s (dv floats) and returns lse_s. A row that sees no
 * key gets O_s = 0 even when a NaN sink logit makes the weights NaN (the sink adds nothing to O). */
static float merge_row(const Tiles *s, int i, int dv, float s2, int sees_none, float *o_out)
{
    float m = s2;
    for (int w = 0; w < TCD_WARPS; w++)
        m = fmaxf(m, s->warp[w].m[i]);
    const float m_ref = m == -INFINITY ? 0.0f : m;
    float l = s2 == -INFINITY ? 0.0f : exp2f(s2 - m_ref);
    for (int c = 0; c < dv; c++)
        o_out[c] = 0.0f;
    for (int w = 0; w < TCD_WARPS; w++) {
        const float scale = exp2f(s->warp[w].m[i] - m_ref);
        l += scale * s->warp[w].l[i];
        for (int c = 0; c < dv; c++)
            o_out[c] += scale * s->warp[w].O[(size_t)i * dv + c];
    }
    const int empty = l == 0.0f;
    const float inv_l = empty ? 0.0f : 1.0f / l;
    for (int c = 0; c < dv; c++)
        o_out[c] = sees_none ? 0.0f : o_out[c] * inv_l;
    return empty ? -INFINITY : (m + log2f(l)) * LN2;
}

/* How the keys are split, and where the splits write. */
typedef struct {
    int Br, blocks_per_head, splits;
    float *out_o, *out_lse; /* o and lse (one split), or the partials (splits, B*Hq*Tq, dv|1) */
} Plan;

/* One work item: split `split` of the keys that query block i0 of kv head g = b * Hkv + kvh sees,
 * its tiles walked by the warps in turns, then the warps merged into the split's partial. */
static void split_block(const AttnProblem *p, int g, int i0, int split, const Plan *plan, Tiles *s,
                        HbmCounter *hbm)
{
    const int R = packed_rows(p), d = p->d, dv = p->dv, rows = min_int(plan->Br, R - i0);
    const int b = g / p->Hkv, kvh = g % p->Hkv, group = p->Hq / p->Hkv;
    if (p->page_size > 0)
        hbm_count_read(hbm, sizeof(int32_t)); /* seq_lens[b] */
    const Causal causal = mask_of(p, b);
    const KeySpan span = key_span(tile_runs(causal, i0, rows));
    const Chunk chunk = split_chunk(span_count(span), plan->splits, split);

    widen(s->Q, p->q_bf16 + ((size_t)g * R + i0) * d, (size_t)rows * d); /* Q16_i  (rows, d) */
    hbm_count_read(hbm, (uint64_t)rows * d * sizeof(uint16_t));
    for (int w = 0; w < TCD_WARPS; w++)
        for (int i = 0; i < rows; i++) {
            s->warp[w].m[i] = -INFINITY, s->warp[w].l[i] = 0.0f;
            for (int c = 0; c < dv; c++)
                s->warp[w].O[(size_t)i * dv + c] = 0.0f;
        }

    /* exercise: begin — the warps' turns: tile t of the split (TCD_BLOCK_C keys from chunk.first) goes to warp t % TCD_WARPS, which gathers it and runs tile_step on it (check 16: o and lse of the cases longer than one tile) | stub: (void)chunk; (void)load_keys; (void)tile_step; */
    for (int t = 0; t < tcd_tiles(chunk.end - chunk.first); t++) {
        const int k0 = chunk.first + t * TCD_BLOCK_C, n = min_int(TCD_BLOCK_C, chunk.end - k0);
        load_keys(p, b, kvh, span, k0, n, s, hbm); /* K16_t, V16_t  (n, d), (n, dv) */
        tile_step(p, causal, span, i0, rows, k0, n, s, &s->warp[t % TCD_WARPS]);
    }
    /* exercise: end */

    const size_t row0 = (size_t)split * output_rows(p) + (size_t)g * R + i0; /* packed rows are o's rows */
    for (int i = 0; i < rows; i++) {
        // split 0 holds the learned sink logit of the row's query head, in base 2
        const int with_sink = p->sinks && split == 0;
        const float s2 = with_sink ? p->sinks[kvh * group + (i0 + i) / p->Tq] * LOG2E : -INFINITY;
        const int sees_none = visible_count(row_runs(causal, i0 + i)) == 0;
        plan->out_lse[row0 + i] = merge_row(s, i, dv, s2, sees_none, plan->out_o + (row0 + i) * dv);
    }
    hbm_count_write(hbm, (uint64_t)rows * (dv + 1) * sizeof(float));
}

/* Merges the splits' partials of every output row: lse = log sum_s exp(lse_s),
 * O = sum_s exp(lse_s - lse) O_s (stage 11's combine). A row no split saw stays O = 0, lse = -inf. */
static void combine(const AttnProblem *p, const Plan *plan, AttnTensors *t, int workers, HbmCounter *hbm)
{
    const size_t n = output_rows(p), dv = (size_t)p->dv;
    const int splits = plan->splits;
#pragma omp parallel for num_threads(workers) schedule(static)
    for (long row = 0; row < (long)n; row++) {
        float m = -INFINITY;
        for (int s = 0; s < splits; s++)
            m = fmaxf(m, plan->out_lse[(size_t)s * n + (size_t)row]);
        // Shift by 0 when no split saw a key (m = -inf): every term is then exp(-inf) = 0, but a
        // split whose lse_s is NaN (fmaxf passed over it) still makes the sum, lse and o NaN
        const float m_ref = m == -INFINITY ? 0.0f : m;
        float sum = 0.0f;
        for (int s = 0; s < splits; s++)
            sum += expf(plan->out_lse[(size_t)s * n + (size_t)row] - m_ref);
        const float lse = sum == 0.0f ? -INFINITY : m_ref + logf(sum);
        // A row that sees no key keeps o = 0, even when a NaN sink logit makes its weights NaN
        const size_t R = (size_t)packed_rows(p);
        const int b = (int)((size_t)row / R / (size_t)p->Hkv);
        const int sees_none = visible_count(row_runs(mask_of(p, b), (int)((size_t)row % R))) == 0;
        float *o = t->o + (size_t)row * dv;
        for (size_t c = 0; c < dv; c++)
            o[c] = 0.0f;
        for (int s = 0; s < splits && lse != -INFINITY && !sees_none; s++) {
            const float w = expf(plan->out_lse[(size_t)s * n + (size_t)row] - lse);
            const float *o_s = plan->out_o + ((size_t)s * n + (size_t)row) * dv;
            for (size_t c = 0; c < dv; c++)
                o[c] += w * o_s[c];
        }
        t->lse[row] = lse;
    }
    hbm_count_read(hbm, (uint64_t)splits * n * (dv + 1) * sizeof(float));
    hbm_count_write(hbm, (uint64_t)n * (dv + 1) * sizeof(float));
}

/* bf16 inputs are the runner's job (runner_run makes them for a PRECISION_BF16 stage). */
static int need_bf16_inputs(const AttnProblem *p, FlError *err)
{
    if (p->q_bf16 && p->k_bf16 && p->v_bf16)
        return FL_OK;
    return fl_fail(err, FL_BAD_INPUT, "stage 16 (tc_decode, cpu): no bf16 copies of the inputs; run it "
                   "through runner_run, which makes them");
}

static int tcd_forward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    int rc = need_bf16_inputs(p, err);
    if (rc != FL_OK || p->Tq <= 0 || p->B <= 0 || p->Hq <= 0)
        return rc;
    Plan plan;
    plan.Br = tcd_block_rows(packed_rows(p));
    plan.blocks_per_head = (packed_rows(p) + plan.Br - 1) / plan.Br;
    plan.splits = split_plan(p, ctx);
    plan.out_o = plan.splits > 1 ? (float *)ctx->workspace : t->o;
    plan.out_lse = plan.splits > 1 ? plan.out_o + (size_t)plan.splits * output_rows(p) * p->dv : t->lse;
    const long items = (long)p->B * p->Hkv * plan.blocks_per_head * plan.splits;
    const long threads = ctx->threads > 0 ? ctx->threads : 1;
    const int workers = (int)(items < threads ? items : threads); /* items >= 1 here */

    Tiles *tiles = calloc((size_t)workers, sizeof *tiles);
    int ok = tiles != NULL;
    for (int w = 0; ok && w < workers; w++)
        ok = tiles_alloc(p, plan.Br, &tiles[w]);
    if (!ok) {
        for (int w = 0; tiles && w < workers; w++)
            tiles_free(&tiles[w]);
        free(tiles);
        return fl_fail(err, FL_BAD_INPUT, "stage 16 (tc_decode, cpu): out of host memory for the tiles");
    }
#pragma omp parallel for num_threads(workers) schedule(dynamic)
    for (long item = 0; item < items; item++) {
        const int split = (int)(item % plan.splits);
        const long block = item / plan.splits;
        const int g = (int)(block / plan.blocks_per_head), i0 = (int)(block % plan.blocks_per_head) * plan.Br;
        split_block(p, g, i0, split, &plan, &tiles[omp_get_thread_num()], ctx->hbm);
    }
    for (int w = 0; w < workers; w++)
        tiles_free(&tiles[w]);
    free(tiles);

    if (plan.splits > 1)
        combine(p, &plan, t, workers, ctx->hbm);
    return FL_OK;
}

static const StageImpl tc_decode = {
    .stage = "16",
    .name = "tc_decode",
    .variant = "",
    .device = DEVICE_CPU,
    .lesson = "stage 11's paged split-KV decode in bf16: a kv head's packed query rows as an MMA's M",
    .features = FEAT_CAUSAL | FEAT_GQA | FEAT_WINDOW | FEAT_SINK_TOKENS | FEAT_SINKS | FEAT_PAGED,
    .forward = tcd_forward,
    .backward = NULL,
    .workspace_bytes = tcd_workspace_bytes, /* the partials, when there is more than one split */
    .precision = PRECISION_BF16,
    .head_dims = {64, 128},
};

const StageImpl *const stage16_tc_decode_cpu[] = {&tc_decode, NULL};
