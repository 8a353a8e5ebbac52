/* stages/17_tc_mla/reference.c — stage 09's absorbed MLA step in bf16 with float32 sums, CPU: the
 * arithmetic a tensor-core kernel of the step does, rounding by rounding. Its parent is stage 09's
 * mla.c (`flashlab diff 09 17`).
 *
 * New in stage 17: every tensor a GPU would keep in bf16 is rounded to bf16 (common/bf16.h) where
 * it is made, and every sum is float32, as on tensor cores (a product of two bf16 numbers is exact
 * in float32). The rounding points, in the order of the step (shapes as in stage 09):
 *   the inputs x, ckv, kpe and the six weights (the stage's own copies, made first);
 *   c_q = x W_dq (mq);  q_nope_h = c_q W_uq_h (dh);  q_pe_h = RoPE(c_q W_qr_h) (p, rotated in
 *   float32, rounded once);  q_lat_h = q_nope_h W_uk_h^T (m);
 *   P~ on its way into P~ ckv (the row sum l adds the unrounded P~, as stage 12 does);
 *   o_lat = the splits' merged O (m);  o_h = o_lat_h W_uv_h (dv).
 * y = sum_h o_h W_o_h is the step's output and stays float32.
 *
 * The latent attention is split over the cache as in stage 11 (tiles.h): a work item is a block of
 * TCM_BLOCK_R stacked rows of one sequence and one split of the keys the block sees; it walks its
 * keys in tiles of TCM_BLOCK_C, and each row's running max moves tile by tile, because where P~ is
 * rounded depends on the max it is taken against. The scores are in base 2 (scale log2 e folded
 * in), as in stages 12, 14, 15 and 16. With more than one split each item writes its rows' O_s and
 * lse_s, and merge_splits() combines them by their lse (stage 11's combine) before o_lat is rounded.
 *
 * The HBM counters count what a kernel of this step moves: 2 bytes for every bf16 element, 4 for y
 * and the splits' float32 partials (docs/hbm_model.md, "Stage 17"). Making the bf16 copies of the
 * inputs is setup, as the runner's conversion of a bf16 attention stage's inputs is, and is not
 * counted. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "bf16.h"
#include "hbm.h"
#include "kind_mla_stage.h"
#include "parallel.h"
#include "rope.h"
#include "tiles.h"
#include "workspace.h"

enum { BF16_BYTES = 2 };
static const float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

static void round_to_bf16(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = bf16_round(x[i]);
}

/* What a product leaves in HBM: bf16 (rounded here), bf16 that the caller rounds after an epilogue
 * of its own (RoPE), or float32 (y). */
typedef enum { OUT_BF16, OUT_BF16_AFTER_EPILOGUE, OUT_F32 } ProductOut;

/* C (rows, n) = A (rows, k) B (k, n) in float32 sums of bf16 operands, row-major with leading
 * dimensions. Counts A and B read at 2 bytes an element, C written at 2 or 4. */
static void gemm_counted(HbmCounter *hbm, size_t rows, size_t n, size_t k, const float *A, size_t lda,
                         int trans_b, const float *Bm, size_t ldb, float *C, size_t ldc, ProductOut out)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (int)rows, (int)n,
                (int)k, 1.0f, A, (int)lda, Bm, (int)ldb, 0.0f, C, (int)ldc);
    if (out == OUT_BF16)
        for (size_t i = 0; i < rows; i++)
            round_to_bf16(C + i * ldc, n);
    hbm_count_read(hbm, (rows * k + k * n) * BF16_BYTES);
    hbm_count_write(hbm, rows * n * (out == OUT_F32 ? sizeof(float) : BF16_BYTES));
}

/* ---- the query and output projections --------------------------------------------------------- */

/* c_q (B Tq, mq), q_nope (B Tq, H, dh), q_pe (B Tq, H, p): token-major, each rounded to bf16; RoPE
 * turns q_pe in float32 before its rounding (a kernel would do it in the product's epilogue). */
static void project_queries(const MlaProblem *p, const Bf16Buffers *w, HbmCounter *hbm)
{
    const size_t N = (size_t)p->B * p->Tq, H = p->H;
    gemm_counted(hbm, N, p->mq, p->D, w->in[MLA_X], p->D, 0, w->in[MLA_W_DQ], p->mq, w->c_q, p->mq, OUT_BF16);
    gemm_counted(hbm, N, H * p->dh, p->mq, w->c_q, p->mq, 0, w->in[MLA_W_UQ], H * p->dh, w->q_nope, H * p->dh,
                 OUT_BF16);
    gemm_counted(hbm, N, H * p->p, p->mq, w->c_q, p->mq, 0, w->in[MLA_W_QR], H * p->p, w->q_pe, H * p->p,
                 OUT_BF16_AFTER_EPILOGUE);
    for (size_t t = 0; t < N; t++) { /* RoPE: token t = b Tq + i at position Tk - Tq + i */
        const int pos = p->Tk - p->Tq + (int)(t % (size_t)p->Tq);
        for (size_t h = 0; h < H; h++)
            rope_rotate(w->q_pe + (t * H + h) * p->p, p->p, pos, p->rope_theta);
    }
    round_to_bf16(w->q_pe, N * H * p->p);
}

/* y (B Tq, D) = o (B Tq, H dv) W_o (H dv, D): one product over all heads, y in float32. */
static void output_projection(const MlaProblem *p, const Bf16Buffers *w, float *y, HbmCounter *hbm)
{
    const size_t N = (size_t)p->B * p->Tq, Hdv = (size_t)p->H * p->dv;
    gemm_counted(hbm, N, p->D, Hdv, w->o, Hdv, 0, w->in[MLA_W_O], p->D, y, p->D, OUT_F32);
}

/* q_lat_h = q_nope_h W_uk_h^T   (N, m) per head: W_uk_h is w_uk[:, h, :], (m, dh) with row stride H dh. */
static void absorb_w_uk(const MlaProblem *p, const Bf16Buffers *w, HbmCounter *hbm)
{
    const size_t N = (size_t)p->B * p->Tq, H = p->H, dh = p->dh, m = p->m;
    for (size_t h = 0; h < H; h++)
        gemm_counted(hbm, N, m, dh, w->q_nope + h * dh, H * dh, 1, w->in[MLA_W_UK] + h * dh, H * dh,
                     w->q_lat + h * m, H * m, OUT_BF16);
}

/* o_h = o_lat_h W_uv_h   (N, dv) per head: W_uv_h is w_uv[:, h, :], (m, dv) with row stride H dv. */
static void absorb_w_uv(const MlaProblem *p, const Bf16Buffers *w, HbmCounter *hbm)
{
    const size_t N = (size_t)p->B * p->Tq, H = p->H, dv = p->dv, m = p->m;
    for (size_t h = 0; h < H; h++)
        gemm_counted(hbm, N, dv, m, w->o_lat + h * m, H * m, 0, w->in[MLA_W_UV] + h * dv, H * dv, w->o + h * dv,
                     H * dv, OUT_BF16);
}

/* ==== the latent attention, split over the cache ============================================== */

/* A worker's tiles: TCM_BLOCK_R query rows, TCM_BLOCK_C cache rows. */
typedef struct {
    float *Ql, *Qp; /* query rows: latent part (BR, m), RoPE part (BR, p) */
    float *Kc, *Kp; /* cache rows: ckv_j (BC, m) = keys' latent part = values, kpe_j (BC, p) */
    float *O;       /* Õ, then O   (BR, m) */
    float *S;       /* scores (base 2), then P~ rounded   (BR, BC) */
    float *mx, *l;  /* running max (base 2) and sum   (BR) */
} Tiles;

static void tiles_free(Tiles *s)
{
    free(s->Ql), free(s->Qp), free(s->Kc), free(s->Kp), free(s->O), free(s->S), free(s->mx), free(s->l);
    memset(s, 0, sizeof *s);
}

static int tiles_alloc(const MlaProblem *p, Tiles *s)
{
    const size_t m = p->m, pe = p->p, BR = TCM_BLOCK_R, BC = TCM_BLOCK_C;
    s->Ql = malloc(BR * m * sizeof(float)), s->Qp = malloc(BR * pe * sizeof(float));
    s->Kc = malloc(BC * m * sizeof(float)), s->Kp = malloc(BC * pe * sizeof(float));
    s->O = malloc(BR * m * sizeof(float)), s->S = malloc(BR * BC * sizeof(float));
    s->mx = malloc(BR * sizeof(float)), s->l = malloc(BR * sizeof(float));
    return s->Ql && s->Qp && s->Kc && s->Kp && s->O && s->S && s->mx && s->l;
}

/* Counted copies of n bf16 elements held as floats, HBM to a tile and back. */
static void load_bf16(HbmCounter *hbm, float *dst, const float *src, size_t n)
{
    memcpy(dst, src, n * sizeof(float));
    hbm_count_read(hbm, n * BF16_BYTES);
}

/* One row's step over a tile of n base-2 scores a: the running max and sum move (the sum adds the
 * unrounded 2^(a - max)), Õ is rescaled, and a becomes P~ rounded to bf16 for P~ ckv. A row that
 * has seen no key yet (max still -inf) keeps Õ = 0 and l = 0. */
static void tile_softmax_row(float *a, size_t n, float *mx, float *l, float *o, size_t m)
{
    /* exercise: begin — one row's step over a tile: the running max and sum move (the sum adds the unrounded 2^(a - max)), Õ is rescaled, and a becomes P~ rounded to bf16 (check 17: y.npy of the tc_mla_* cases, whose rows see more than one tile) | stub: (void)a, (void)n, (void)mx, (void)l, (void)o, (void)m; */
    float m_new = *mx;
    for (size_t j = 0; j < n; j++)
        m_new = fmaxf(m_new, a[j]);
    const float shift = m_new == -INFINITY ? 0.0f : m_new; /* every key so far masked: the terms are 0 */
    float row_sum = 0.0f;
    for (size_t j = 0; j < n; j++) {
        const float e = exp2f(a[j] - shift);
        row_sum += e;
        a[j] = bf16_round(e);
    }
    const float alpha = exp2f(*mx - shift); /* exp2(-inf) = 0 before the first key */
    *l = *l * alpha + row_sum;
    *mx = m_new;
    for (size_t c = 0; c < m; c++) /* a loop, not cblas_sscal: a NaN must come through */
        o[c] *= alpha;
    /* exercise: end */
}

/* The item (batch b, stacked rows r0 .. r0 + rows - 1, split `split` of `splits`): its chunk of the
 * keys the block sees, tile by tile. Writes o_lat of those rows (one split) or their O_s and lse_s. */
static void latent_item(const MlaProblem *p, const Bf16Buffers *w, size_t b, size_t r0, size_t rows, int split,
                        int splits, const Tiles *s, HbmCounter *hbm)
{
    const size_t m = p->m, pe = p->p, H = p->H, BC = TCM_BLOCK_C, R = (size_t)p->Tq * H;
    const size_t row0 = b * R + r0; /* first row in the (N, H) layout of q_lat and o_lat */
    const int block_keys = keys_seen(p->causal, (int)(r0 + rows - 1), p->H, p->Tq, p->Tk);
    const Chunk chunk = split_chunk(block_keys, splits, split);
    const float *ckv = w->in[MLA_CKV] + b * p->Tk * m, *kpe = w->in[MLA_KPE] + b * p->Tk * pe;
    const float scale_log2 = p->scale * kLog2e;

    load_bf16(hbm, s->Ql, w->q_lat + row0 * m, rows * m); /* [q_lat, q_pe]: read once an item */
    load_bf16(hbm, s->Qp, w->q_pe + row0 * pe, rows * pe);
    for (size_t i = 0; i < rows; i++) {
        s->mx[i] = -INFINITY, s->l[i] = 0.0f;
        memset(s->O + i * m, 0, m * sizeof(float));
    }
    for (size_t j0 = (size_t)chunk.first; j0 < (size_t)chunk.end; j0 += BC) {
        const size_t n = min_size(BC, (size_t)chunk.end - j0);
        load_bf16(hbm, s->Kc, ckv + j0 * m, n * m); /* the cache tile: keys and values at once */
        load_bf16(hbm, s->Kp, kpe + j0 * pe, n * pe);
        // S = scale log2(e) (Q_lat Kc^T + Q_pe Kp^T)   (rows, n)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)n, (int)m, scale_log2, s->Ql, (int)m,
                    s->Kc, (int)m, 0.0f, s->S, (int)n);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)n, (int)pe, scale_log2, s->Qp,
                    (int)pe, s->Kp, (int)pe, 1.0f, s->S, (int)n);
        for (size_t i = 0; i < rows; i++) {
            const size_t seen = (size_t)keys_seen(p->causal, (int)(r0 + i), p->H, p->Tq, p->Tk);
            for (size_t j = seen > j0 ? seen - j0 : 0; j < n; j++)
                s->S[i * n + j] = -INFINITY; /* past the row's position (causal) */
            tile_softmax_row(s->S + i * n, n, &s->mx[i], &s->l[i], s->O + i * m, m);
        }
        // Õ += P~ Kc: the same tile, now as values   (rows, m)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)m, (int)n, 1.0f, s->S, (int)n, s->Kc,
                    (int)m, 1.0f, s->O, (int)m);
    }
    for (size_t i = 0; i < rows; i++) { /* O = Õ / l; a row this split gives no key: O = 0 */
        const float inv = s->l[i] > 0.0f ? 1.0f / s->l[i] : 0.0f;
        for (size_t c = 0; c < m; c++)
            s->O[i * m + c] *= inv;
    }
    if (splits == 1) {
        round_to_bf16(s->O, rows * m);
        memcpy(w->o_lat + row0 * m, s->O, rows * m * sizeof(float));
        hbm_count_write(hbm, rows * m * BF16_BYTES);
        return;
    }
    const size_t NH = (size_t)p->B * R;
    hbm_store(hbm, w->part_o + ((size_t)split * NH + row0) * m, s->O, rows * m);
    float lse[TCM_BLOCK_R];
    for (size_t i = 0; i < rows; i++) /* natural log, as stage 11's partials */
        lse[i] = s->l[i] > 0.0f ? (s->mx[i] + log2f(s->l[i])) * kLn2 : -INFINITY;
    hbm_store(hbm, w->part_lse + (size_t)split * NH + row0, lse, rows);
}

/* Stage 11's combine, row by row: lse = log sum_s exp(lse_s), o_lat = bf16(sum_s exp(lse_s - lse) O_s).
 * Every row sees a key (Tq <= Tk), so some split has a finite lse_s. */
static void merge_splits(const MlaProblem *p, const Bf16Buffers *w, int splits, int threads, HbmCounter *hbm)
{
    const size_t NH = (size_t)p->B * p->Tq * p->H, m = p->m;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long r = 0; r < (long)NH; r++) {
        float top = -INFINITY;
        for (int s = 0; s < splits; s++)
            top = fmaxf(top, w->part_lse[(size_t)s * NH + r]);
        float sum = 0.0f;
        for (int s = 0; s < splits; s++)
            sum += expf(w->part_lse[(size_t)s * NH + r] - top);
        const float total = top + logf(sum);
        float *out = w->o_lat + (size_t)r * m;
        memset(out, 0, m * sizeof(float));
        for (int s = 0; s < splits; s++) {
            const float weight = expf(w->part_lse[(size_t)s * NH + r] - total);
            const float *o_s = w->part_o + ((size_t)s * NH + r) * m;
            for (size_t c = 0; c < m; c++)
                out[c] += weight * o_s[c];
        }
        round_to_bf16(out, m);
    }
    hbm_count_read(hbm, (size_t)splits * NH * (m + 1) * sizeof(float));
    hbm_count_write(hbm, NH * m * BF16_BYTES);
}

/* Blocks of TCM_BLOCK_R stacked rows per sequence, before splitting. */
static size_t row_blocks(const MlaProblem *p)
{
    return ((size_t)p->Tq * p->H + TCM_BLOCK_R - 1) / TCM_BLOCK_R;
}

/* --splits, or the heuristic filling the CPU's threads once; never more splits than keys. */
static int split_plan(const MlaProblem *p, const RunCtx *ctx)
{
    const int threads = ctx->threads > 0 ? ctx->threads : 1;
    int splits = ctx->splits > 0 ? ctx->splits
                                 : split_count((long)(p->B * row_blocks(p)), threads, p->Tk, TCM_MIN_SPLIT_KEYS);
    return splits > p->Tk ? p->Tk : splits;
}

/* Every (batch, block of stacked rows, split) is one work item; each worker has its own tiles. */
static int latent_attention(const MlaProblem *p, const Bf16Buffers *w, int splits, const RunCtx *ctx, FlError *err)
{
    const size_t R = (size_t)p->Tq * p->H, per_batch = row_blocks(p) * (size_t)splits;
    const size_t items = (size_t)p->B * per_batch;
    const int workers = (int)min_size((size_t)(ctx->threads > 0 ? ctx->threads : 1), items);
    int failed = 0;
    blas_threads_push(1);
#pragma omp parallel num_threads(workers > 0 ? workers : 1)
    {
        Tiles s = {0};
        const int ok = tiles_alloc(p, &s);
        if (!ok) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic)
        for (long it = 0; it < (long)items; it++) {
            const size_t b = (size_t)it / per_batch, rest = (size_t)it % per_batch;
            const size_t r0 = rest / (size_t)splits * TCM_BLOCK_R;
            if (ok)
                latent_item(p, w, b, r0, min_size(TCM_BLOCK_R, R - r0), (int)(rest % (size_t)splits), splits, &s,
                            ctx->hbm);
        }
        tiles_free(&s);
    }
    blas_threads_pop();
    if (failed)
        return fl_fail(err, FL_BAD_INPUT, "stage 17: out of memory for the tiles of %d rows and %d keys (m = %d)",
                       TCM_BLOCK_R, TCM_BLOCK_C, p->m);
    return FL_OK;
}

static size_t tc_mla_workspace_bytes(const MlaProblem *p, const RunCtx *ctx)
{
    return bf16_buffers(p, split_plan(p, ctx), NULL, NULL);
}

static int tc_mla_forward(const MlaProblem *p, float *y, RunCtx *ctx, FlError *err)
{
    const int splits = split_plan(p, ctx);
    Bf16Buffers w;
    bf16_buffers(p, splits, ctx->workspace, &w);
    for (int id = 0; id < MLA_INPUT_COUNT; id++) { /* the bf16 inputs a kernel is handed */
        memcpy(w.in[id], p->in[id], mla_numel(p, id) * sizeof(float));
        round_to_bf16(w.in[id], mla_numel(p, id));
    }
    project_queries(p, &w, ctx->hbm);
    absorb_w_uk(p, &w, ctx->hbm);
    int rc = latent_attention(p, &w, splits, ctx, err);
    if (rc != FL_OK)
        return rc;
    if (splits > 1)
        merge_splits(p, &w, splits, ctx->threads > 0 ? ctx->threads : 1, ctx->hbm);
    absorb_w_uv(p, &w, ctx->hbm);
    output_projection(p, &w, y, ctx->hbm);
    return FL_OK;
}

static const MlaEntry tc_mla_entry = {"mla", tc_mla_forward, tc_mla_workspace_bytes};

static const StageImpl tc_mla_cpu = {
    .stage = "17", .name = "tc_mla", .variant = "", .device = DEVICE_CPU,
    .lesson = "stage 09's absorbed MLA step in bf16 with float32 sums: the latent attention split over the cache",
    .kind_entry = &tc_mla_entry, .precision = PRECISION_BF16,
};

const StageImpl *const stage17_tc_mla_cpu[] = {&tc_mla_cpu, NULL};
