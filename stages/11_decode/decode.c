/* stages/11_decode/decode.c — decoding: split-KV attention over a paged KV cache (CPU, forward).
 *
 * Forward of stage 10 (FA2 in an SRAM arena of M bytes, GQA rows packed, causal / window / sink
 * tokens / learned sinks), with two changes. Both index rules live in paged.h.
 *
 * New in stage 11, (1) the paged cache. Keys and values are no longer rows of one (Tk, d) matrix
 * per head: key j of sequence b sits in page block_table[b, j / page_size] of a shared pool, and
 * sequence b has its own length seq_lens[b]. A K/V tile is therefore gathered row by row through
 * the block table (load_keys): each row is still read once, and the tile's block-table entries
 * are read with it. Each sequence has its own mask (its Tq queries are its last Tq positions).
 *
 * New in stage 11, (2) split-KV. A decoding step has few query rows (group * Tq per kv head) and
 * many keys, so one work item per query block leaves workers idle. The keys each query block
 * sees are cut into `splits` chunks (split_chunk) processed as separate work items; chunk s ends
 * with a partial result over its keys only:
 *   O_s = (sum over its keys of exp(S - m_s) V) / l_s,     lse_s = m_s + log l_s
 * and a combine pass merges the partials of each row with their logsumexps:
 *   lse = log sum_s exp(lse_s),     O = sum_s exp(lse_s - lse) O_s
 * which is the online softmax's rescaling again, now between chunks instead of between tiles.
 * A learned sink logit joins the softmax once: split 0 starts from it (m = s_h, l = 1), the others
 * from (m = -inf, l = 0). With one split the partial is already the answer and goes straight to o
 * and lse (no workspace, no combine).
 * Work items are (sequence, kv head, query block, split); the split count comes from
 * split_count() with the worker count as the units to fill (ctx->splits overrides it).
 * Traffic (docs/hbm_model.md): every key a block sees is read once per query block (each split
 * reads its own keys), Q once per split, the partials written and read back once, o and lse
 * written once; for a paged cache also seq_lens[b] once per work item and, per tile, the
 * block-table entries of the pages its keys lie in. */

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdlib.h>

#include "attn.h"
#include "hbm.h"
#include "mask.h"
#include "paged.h"
#include "parallel.h"

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* The mask of sequence b: its own length, its queries at its end. */
static Causal mask_of(const AttnProblem *p, int b)
{
    return causal_make(p->causal, p->Tq, seq_keys(p, b), p->window, p->sink_tokens);
}

/* One worker's tiles, all inside its SRAM arena of M bytes. */
typedef struct {
    float *K, *V;   /* K_j (Bc, d)   V_j (Bc, dv), gathered through the block table */
    float *Q, *O;   /* Q_i (Br, d)   Õ_i, then O_s (Br, dv) */
    float *S;       /* scores, then P~   (Br, Bc) */
    float *m, *l;   /* running max and unnormalised sum of the block's rows   (Br) */
    float *alpha;   /* rescale factor of Õ_i   (Br) */
    float *lse;     /* m + log l   (Br) */
} Tiles;

typedef struct {
    size_t M, Br, Bc;
} Blocking;

/* Stage 10's rule: Bc = M / (4 (d + dv)), Br = min(Bc, d); ctx->block_r / block_c win. */
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

/* How the keys are split, and where the splits write. */
typedef struct {
    Blocking b;
    size_t blocks_per_head; /* query blocks of one kv head's R packed rows */
    int splits;
    float *out_o, *out_lse; /* o and lse (one split), or the partials (splits, B*Hq*Tq, dv|1) */
} Plan;

/* Splits: ctx->splits, or split_count (paged.h) with the worker threads as the units to fill and
 * every split at least 4 tiles of keys long. */
static int split_plan(const AttnProblem *p, const RunCtx *ctx, const Blocking *b)
{
    if (ctx->splits > 0)
        return ctx->splits;
    return split_count(query_blocks(p, (int)b->Br), ctx->threads > 0 ? ctx->threads : 1, longest_span(p),
                       (int)(4 * b->Bc));
}

/* The partials live in the workspace only when there is more than one split. */
static size_t decode_workspace_bytes(const AttnProblem *p, const RunCtx *ctx, Direction dir)
{
    (void)dir;
    const Blocking b = blocking(p, ctx);
    return partials_bytes(p, split_plan(p, ctx, &b));
}

/* Gathers keys [k0, k0 + n) of a span (numbered across its runs) of kv head kvh of sequence b into
 * the K and V tiles, one row at a time through the block table. A paged cache also reads the
 * block-table entry of each page the tile's keys lie in (consecutive keys share one). */
static void load_keys(const AttnProblem *p, int b, int kvh, KeySpan span, size_t k0, size_t n,
                      const Tiles *s, HbmCounter *hbm)
{
    const size_t d = p->d, dv = p->dv;
    int last_page = -1;
    uint64_t pages = 0;
    for (size_t j = 0; j < n; j++) {
        const int key = span_key(span, (int)(k0 + j));
        hbm_load(hbm, s->K + j * d, p->k + kv_offset(p, b, kvh, key, (int)d), d);
        hbm_load(hbm, s->V + j * dv, p->v + kv_offset(p, b, kvh, key, (int)dv), dv);
        if (p->page_size > 0 && page_of(p, b, key) != last_page) {
            last_page = page_of(p, b, key);
            pages++;
        }
    }
    hbm_count_read(hbm, pages * sizeof(int32_t));
}

/* S = -inf where a row does not see its key; keys are the span's [k0, k0 + n). */
static void mask_keys(Causal c, KeySpan span, float *S, size_t i0, size_t rows, size_t k0, size_t n)
{
    for (size_t i = 0; i < rows; i++) {
        const KeyRuns runs = row_runs(c, (int)(i0 + i));
        for (size_t j = 0; j < n; j++)
            if (!sees(runs, span_key(span, (int)(k0 + j))))
                S[i * n + j] = -INFINITY;
    }
}

/* Does a tile (n floats) hold a NaN? (x != x only for a NaN.) */
static int has_nan(const float *x, size_t n)
{
    int any = 0;
    for (size_t k = 0; k < n; k++)
        any |= x[k] != x[k];
    return any;
}

/* O (rows, dv) += P V over the (row, key) pairs the mask keeps only; keys are the span's
 * [k0, k0 + n). A GEMM multiplies the masked pairs too, whose P is 0, and 0 · NaN = NaN: a NaN
 * value would reach rows that do not see it (docs/conventions.md, "Non-finite values"). Used
 * instead of the GEMM only when the V tile holds a NaN, so finite inputs take the GEMM. */
static void masked_pv(Causal c, KeySpan span, const float *P, const float *V, float *O, size_t i0, size_t rows,
                      size_t k0, size_t n, size_t dv)
{
    for (size_t i = 0; i < rows; i++) {
        const KeyRuns runs = row_runs(c, (int)(i0 + i));
        for (size_t j = 0; j < n; j++) {
            if (!sees(runs, span_key(span, (int)(k0 + j))))
                continue;
            for (size_t e = 0; e < dv; e++)
                O[i * dv + e] += P[i * n + j] * V[j * dv + e];
        }
    }
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

/* One work item: split `split` of the keys that query block i0 of kv head g = b * Hkv + kvh sees.
 * FA2's inner loop over the chunk's tiles, then its partial (O_s, lse_s), or o and lse with one
 * split. */
static void split_block(const AttnProblem *p, size_t g, size_t i0, int split, const Plan *plan,
                        const Tiles *s, HbmCounter *hbm)
{
    const size_t R = (size_t)packed_rows(p), d = p->d, dv = p->dv, Br = plan->b.Br, Bc = plan->b.Bc;
    const size_t rows = min_size(Br, R - i0); /* rows in block i; the last may be short */
    const int b = (int)(g / (size_t)p->Hkv), kvh = (int)(g % (size_t)p->Hkv);
    const size_t group = (size_t)(p->Hq / p->Hkv);
    if (p->page_size > 0)
        hbm_count_read(hbm, sizeof(int32_t)); /* seq_lens[b] */
    const Causal causal = mask_of(p, b);
    const KeySpan span = key_span(tile_runs(causal, (int)i0, (int)rows));
    const Chunk chunk = split_chunk(span_count(span), plan->splits, split);

    hbm_load(hbm, s->Q, p->q + (g * R + i0) * d, rows * d); /* Q_i  (rows, d) */
    // Õ = 0; split 0 starts from the learned sink logit (m = s_h, l = 1), the others from nothing
    const int with_sink = p->sinks && split == 0;
    for (size_t i = 0; i < rows; i++) {
        for (size_t c = 0; c < dv; c++)
            s->O[i * dv + c] = 0.0f;
        s->m[i] = with_sink ? p->sinks[g % (size_t)p->Hkv * group + (i0 + i) / (size_t)p->Tq] : -INFINITY;
        s->l[i] = with_sink ? 1.0f : 0.0f;
    }

    for (size_t k0 = (size_t)chunk.first; k0 < (size_t)chunk.end; k0 += Bc) {
        const size_t n = min_size(Bc, (size_t)chunk.end - k0);
        load_keys(p, b, kvh, span, k0, n, s, hbm); /* K_j, V_j  (n, d), (n, dv) */

        // S = Q_i K_j^T * scale   (rows, n), masked key by key
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)n, (int)d, p->scale,
                    s->Q, (int)d, s->K, (int)d, 0.0f, s->S, (int)n);
        mask_keys(causal, span, s->S, i0, rows, k0, n);

        for (size_t i = 0; i < rows; i++)
            online_softmax_row(s->S + i * n, n, &s->m[i], &s->l[i], &s->alpha[i]);

        // Õ_i = alpha Õ_i + P~ V_j   (rows, dv); a NaN value must reach only the rows that see
        // it: then the product skips the masked pairs
        for (size_t i = 0; i < rows; i++)
            for (size_t c = 0; c < dv; c++)
                s->O[i * dv + c] *= s->alpha[i];
        if (has_nan(s->V, n * dv))
            masked_pv(causal, span, s->S, s->V, s->O, i0, rows, k0, n, dv);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)dv, (int)n, 1.0f,
                        s->S, (int)n, s->V, (int)dv, 1.0f, s->O, (int)dv);
    }

    // The split's result over its keys: O_s = Õ / l, lse_s = m + log l. A split that saw no key
    // (l = 0) gives O_s = 0 and lse_s = -inf, which carries no weight in the combine. A row that
    // sees no key at all gets O_s = 0 even when a NaN sink logit made Õ NaN (the sink adds
    // nothing to O).
    /* exercise: begin — the split's partial: O_s = Õ / l, lse_s = m + log l (see above) (check 11 --splits 3: o and lse of every case) */
    for (size_t i = 0; i < rows; i++) {
        const int empty = s->l[i] == 0.0f;
        const int sees_none = visible_count(row_runs(causal, (int)(i0 + i))) == 0;
        const float inv_l = empty ? 0.0f : 1.0f / s->l[i];
        for (size_t c = 0; c < dv; c++)
            s->O[i * dv + c] = sees_none ? 0.0f : s->O[i * dv + c] * inv_l;
        s->lse[i] = empty ? -INFINITY : s->m[i] + logf(s->l[i]);
    }
    /* exercise: end */
    const size_t row0 = (size_t)split * output_rows(p) + g * R + i0; /* packed rows are o's rows */
    hbm_store(hbm, plan->out_o + row0 * dv, s->O, rows * dv);
    hbm_store(hbm, plan->out_lse + row0, s->lse, rows);
}

/* Merges the splits' partials of every output row: lse = log sum_s exp(lse_s),
 * O = sum_s exp(lse_s - lse) O_s. A row no split saw stays O = 0, lse = -inf. */
static void combine(const AttnProblem *p, const Plan *plan, AttnTensors *t, int workers, HbmCounter *hbm)
{
    const size_t n = output_rows(p), dv = (size_t)p->dv;
    const int splits = plan->splits;
#pragma omp parallel for num_threads(workers) schedule(static)
    for (long row = 0; row < (long)n; row++) {
        /* exercise: begin — the lse merge of the row: lse = log sum_s exp(lse_s), O = sum_s exp(lse_s - lse) O_s (check 11 --splits 3: o and lse of every case) */
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
        /* exercise: end */
    }
    hbm_count_read(hbm, (uint64_t)splits * n * (dv + 1) * sizeof(float));
    hbm_count_write(hbm, (uint64_t)n * (dv + 1) * sizeof(float));
}

static void arenas_free(SramArena *arenas, size_t count)
{
    for (size_t w = 0; w < count; w++)
        sram_free(&arenas[w]);
    free(arenas);
}

/* One SRAM arena of M bytes and its tiles per worker. */
static int arenas_make(const AttnProblem *p, const Blocking *b, size_t workers, SramArena **arenas_out,
                       Tiles **tiles_out, FlError *err)
{
    SramArena *arenas = calloc(workers, sizeof *arenas);
    Tiles *tiles = calloc(workers, sizeof *tiles);
    if (!arenas || !tiles) {
        free(arenas);
        free(tiles);
        return fl_fail(err, FL_BAD_INPUT, "decode: out of host memory for %zu SRAM arenas", workers);
    }
    for (size_t w = 0; w < workers; w++) {
        if (sram_init(&arenas[w], b->M) != 0) {
            arenas_free(arenas, w);
            free(tiles);
            return fl_fail(err, FL_BAD_INPUT, "decode: out of host memory for an SRAM arena of M=%zu bytes", b->M);
        }
        if (!tiles_alloc(&arenas[w], p, b, &tiles[w])) {
            arenas_free(arenas, w + 1);
            free(tiles);
            return fl_fail(err, FL_BAD_INPUT,
                           "decode: tiles do not fit in SRAM: M=%zu bytes, Br=%zu, Bc=%zu, d=%d, dv=%d "
                           "need (Br+Bc)(d+dv)+Br*Bc+4*Br floats; raise --sram or lower the block sizes",
                           b->M, b->Br, b->Bc, p->d, p->dv);
        }
    }
    *arenas_out = arenas;
    *tiles_out = tiles;
    return FL_OK;
}

static int decode_forward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    Plan plan;
    plan.b = blocking(p, ctx);
    plan.blocks_per_head = ((size_t)packed_rows(p) + plan.b.Br - 1) / plan.b.Br;
    plan.splits = split_plan(p, ctx, &plan.b);
    plan.out_o = plan.splits > 1 ? (float *)ctx->workspace : t->o;
    plan.out_lse = plan.splits > 1 ? plan.out_o + (size_t)plan.splits * output_rows(p) * p->dv : t->lse;
    const size_t items = (size_t)p->B * p->Hkv * plan.blocks_per_head * (size_t)plan.splits;
    const size_t workers = max_size(1, min_size((size_t)(ctx->threads > 0 ? ctx->threads : 1), items));

    SramArena *arenas = NULL;
    Tiles *tiles = NULL;
    int rc = arenas_make(p, &plan.b, workers, &arenas, &tiles, err);
    if (rc != FL_OK)
        return rc;
    blas_threads_push(1); /* one BLAS thread per OpenMP worker */
#pragma omp parallel for num_threads((int)workers) schedule(dynamic)
    for (long item = 0; item < (long)items; item++) {
        const size_t w = (size_t)omp_get_thread_num();
        const int split = (int)((size_t)item % (size_t)plan.splits);
        const size_t block = (size_t)item / (size_t)plan.splits;
        const size_t g = block / plan.blocks_per_head, i0 = block % plan.blocks_per_head * plan.b.Br;
        split_block(p, g, i0, split, &plan, &tiles[w], ctx->hbm);
    }
    blas_threads_pop();
    arenas_free(arenas, workers);
    free(tiles);

    if (plan.splits > 1)
        combine(p, &plan, t, (int)workers, ctx->hbm);
    return FL_OK;
}

static const StageImpl decode = {
    .stage = "11",
    .name = "decode",
    .variant = "",
    .device = DEVICE_CPU,
    .lesson = "split-KV over a paged KV cache: key chunks in parallel, merged by their lse",
    .features = FEAT_CAUSAL | FEAT_GQA | FEAT_WINDOW | FEAT_SINK_TOKENS | FEAT_SINKS | FEAT_PAGED,
    .forward = decode_forward,
    .backward = NULL,
    .workspace_bytes = decode_workspace_bytes, /* the partials, when there is more than one split */
};

const StageImpl *const stage11_decode_cpu[] = {&decode, NULL};
