/* stages/09_mla/mla.c — multi-head latent attention (DeepSeek-V2), one decoding or prefill step, CPU.
 *
 * New in stage 09: the KV cache holds one latent vector per token instead of H keys and H values.
 * Shapes (attn.h, MlaProblem): x (B, Tq, D), cache ckv (B, Tk, m) and kpe (B, Tk, p), weights
 * w_dq (D, mq), w_uq (mq, H, dh), w_qr (mq, H, p), w_uk (m, H, dh), w_uv (m, H, dv), w_o (H, dv, D).
 * Per token, both variants first project the query (project_queries):
 *   c_q = x W_dq (mq);  q_nope_h = c_q W_uq_h (dh);  q_pe_h = RoPE(c_q W_qr_h) (p)
 * and end with the output projection y = sum_h o_h W_o_h (output_projection).
 * In between, the score of head h, query i, key j is
 *   s = (q_nope_h . k_h,j + q_pe_h . kpe_j) / sqrt(dh + p),   k_h,j = ckv_j W_uk_h,  v_h,j = ckv_j W_uv_h
 * and the two variants differ in where the up-projections W_uk, W_uv are applied:
 *
 *   variant naive: up-project the whole cache to per-head K (B, H, Tk, dh + p) and V (B, H, Tk, dv)
 *     every step, then ordinary attention (stage 08's CPU forward, stage08_gqa_cpu[0]).
 *     Its cache is small, but each step reads it and writes 2 H (dh + p, dv)-wide copies of it.
 *
 *   variant absorbed (the default): move W_uk to the query side, since
 *     q_nope_h . (ckv_j W_uk_h) = (q_nope_h W_uk_h^T) . ckv_j = q_lat_h . ckv_j     (width m)
 *   and W_uv to the output side, since sum_j P_j (ckv_j W_uv_h) = (sum_j P_j ckv_j) W_uv_h.
 *   What is left is multi-query attention straight over the cache: every head's query
 *   [q_lat_h, q_pe_h] (width m + p) against the keys [ckv_j, kpe_j], values ckv_j (width m).
 *   The value rows are the first m columns of the key rows: one tile of the cache serves both
 *   products. latent_attention() runs it FA2-style in the SRAM arena, the H heads of a token
 *   stacked as rows of one block (stage 08's packed rows, here with the token outer: rope.h). */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "kind_mla_stage.h"
#include "hbm.h"
#include "parallel.h"
#include "rope.h"
#include "workspace.h"

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }
static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* C (rows, n) = A (rows, k) B (k, n), row-major with leading dimensions; counts A and B read, C written. */
static void gemm_counted(HbmCounter *hbm, size_t rows, size_t n, size_t k, const float *A, size_t lda,
                         int trans_b, const float *Bm, size_t ldb, float *C, size_t ldc)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (int)rows, (int)n,
                (int)k, 1.0f, A, (int)lda, Bm, (int)ldb, 0.0f, C, (int)ldc);
    hbm_count_read(hbm, (rows * k + k * n) * sizeof(float));
    hbm_count_write(hbm, rows * n * sizeof(float));
}

/* ---- the query and output projections (both variants) ---------------------------------------- */

/* Workspace c_q (B Tq, mq), q_nope (B Tq, H, dh), q_pe (B Tq, H, p): token-major. */
static void project_queries(const MlaProblem *p, float *c_q, float *q_nope, float *q_pe, HbmCounter *hbm)
{
    const size_t N = (size_t)p->B * p->Tq, H = p->H;
    gemm_counted(hbm, N, p->mq, p->D, p->in[MLA_X], p->D, 0, p->in[MLA_W_DQ], p->mq, c_q, p->mq);
    gemm_counted(hbm, N, H * p->dh, p->mq, c_q, p->mq, 0, p->in[MLA_W_UQ], H * p->dh, q_nope, H * p->dh);
    gemm_counted(hbm, N, H * p->p, p->mq, c_q, p->mq, 0, p->in[MLA_W_QR], H * p->p, q_pe, H * p->p);
    for (size_t t = 0; t < N; t++) { /* RoPE in place: token t = b Tq + i at position Tk - Tq + i */
        const int pos = p->Tk - p->Tq + (int)(t % (size_t)p->Tq);
        for (size_t h = 0; h < H; h++)
            rope_rotate(q_pe + (t * H + h) * p->p, p->p, pos, p->rope_theta);
    }
    hbm_count_read(hbm, N * H * p->p * sizeof(float));
    hbm_count_write(hbm, N * H * p->p * sizeof(float));
}

/* y (B Tq, D) = o (B Tq, H dv) W_o (H dv, D): one product over all heads. */
static void output_projection(const MlaProblem *p, const float *o, float *y, HbmCounter *hbm)
{
    const size_t N = (size_t)p->B * p->Tq, Hdv = (size_t)p->H * p->dv;
    gemm_counted(hbm, N, p->D, Hdv, o, Hdv, 0, p->in[MLA_W_O], p->D, y, p->D);
}

/* ==== variant naive: per-head K and V materialised, then stage 08 ============================== */

/* Stage 08's CPU implementations, in registry order (the default first): the attention this variant
 * runs over the materialised heads is stage 08's forward, a dependency the linker resolves, not a
 * run-time registry lookup. */
extern const StageImpl *const stage08_gqa_cpu[];

static size_t naive_workspace_bytes(const MlaProblem *p, const RunCtx *ctx)
{
    const StageImpl *inner = stage08_gqa_cpu[0];
    const AttnProblem a = naive_attention_problem(p);
    return naive_workspace_with(p, inner->workspace_bytes ? inner->workspace_bytes(&a, ctx, DIR_FWD) : 0);
}

/* (B, T, H, n) token-major rows -> (B, H, T, width) head-major rows at column offset c0 (counted). */
static void to_heads(HbmCounter *hbm, const float *src, size_t B, size_t T, size_t H, size_t n,
                     float *dst, size_t width, size_t c0)
{
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < T; t++)
            for (size_t h = 0; h < H; h++)
                memcpy(dst + ((b * H + h) * T + t) * width + c0, src + ((b * T + t) * H + h) * n,
                       n * sizeof(float));
    hbm_count_read(hbm, B * T * H * n * sizeof(float));
    hbm_count_write(hbm, B * T * H * n * sizeof(float));
}

/* The shared RoPE key kpe_j into columns dh.. of every head's K (B, H, Tk, dh + p): H copies. */
static void broadcast_rope_keys(const MlaProblem *p, float *k, HbmCounter *hbm)
{
    const size_t B = p->B, H = p->H, Tk = p->Tk, pe = p->p, dk = p->dh + p->p;
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < H; h++)
            for (size_t j = 0; j < Tk; j++)
                memcpy(k + ((b * H + h) * Tk + j) * dk + p->dh, p->in[MLA_KPE] + (b * Tk + j) * pe,
                       pe * sizeof(float));
    hbm_count_read(hbm, B * H * Tk * pe * sizeof(float));
    hbm_count_write(hbm, B * H * Tk * pe * sizeof(float));
}

static int naive_forward(const MlaProblem *p, float *y, RunCtx *ctx, FlError *err)
{
    const StageImpl *inner = stage08_gqa_cpu[0];
    NaiveBuffers w = {0};
    naive_buffers(p, ctx->workspace, &w);
    HbmCounter *hbm = ctx->hbm;
    const size_t B = p->B, H = p->H, Tq = p->Tq, Tk = p->Tk, dh = p->dh, dv = p->dv, dk = dh + p->p;
    project_queries(p, w.c_q, w.q_nope, w.q_pe, hbm);

    // K_h = [ckv W_uk_h, kpe] and V_h = ckv W_uv_h for every cached token: the up-projection
    gemm_counted(hbm, B * Tk, H * dh, p->m, p->in[MLA_CKV], p->m, 0, p->in[MLA_W_UK], H * dh, w.k_up, H * dh);
    gemm_counted(hbm, B * Tk, H * dv, p->m, p->in[MLA_CKV], p->m, 0, p->in[MLA_W_UV], H * dv, w.v_up, H * dv);
    to_heads(hbm, w.k_up, B, Tk, H, dh, w.k, dk, 0);
    broadcast_rope_keys(p, w.k, hbm);
    to_heads(hbm, w.v_up, B, Tk, H, dv, w.v, dv, 0);
    to_heads(hbm, w.q_nope, B, Tq, H, dh, w.q, dk, 0);
    to_heads(hbm, w.q_pe, B, Tq, H, p->p, w.q, dk, dh);

    // ordinary attention over the materialised heads (stage 08)
    AttnProblem a = naive_attention_problem(p);
    a.q = w.q, a.k = w.k, a.v = w.v;
    AttnTensors t = {w.o, w.lse, NULL, NULL, NULL, NULL};
    RunCtx inner_ctx = *ctx;
    inner_ctx.workspace = w.inner;
    int rc = inner->forward(&a, &t, &inner_ctx, err);
    if (rc != FL_OK)
        return rc;

    // back to token-major (B Tq, H dv), then y = o W_o
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < H; h++)
            for (size_t i = 0; i < Tq; i++)
                memcpy(w.o_tok + ((b * Tq + i) * H + h) * dv, w.o + ((b * H + h) * Tq + i) * dv, dv * sizeof(float));
    hbm_count_read(hbm, B * Tq * H * dv * sizeof(float));
    hbm_count_write(hbm, B * Tq * H * dv * sizeof(float));
    output_projection(p, w.o_tok, y, hbm);
    return FL_OK;
}

/* ==== variant absorbed: W_uk folded into the query, W_uv into the output ======================= */

/* q_lat_h = q_nope_h W_uk_h^T   (N, m) per head: W_uk_h is w_uk[:, h, :], (m, dh) with row stride H dh. */
static void absorb_w_uk(const MlaProblem *p, const float *q_nope, float *q_lat, HbmCounter *hbm)
{
    /* exercise: begin — q_lat_h = q_nope_h W_uk_h^T, every head (check 09: y.npy of every mla_* case) | stub: (void)p, (void)q_nope, (void)q_lat, (void)hbm; */
    const size_t N = (size_t)p->B * p->Tq, H = p->H, dh = p->dh, m = p->m;
    for (size_t h = 0; h < H; h++)
        gemm_counted(hbm, N, m, dh, q_nope + h * dh, H * dh, 1, p->in[MLA_W_UK] + h * dh, H * dh,
                     q_lat + h * m, H * m);
    /* exercise: end */
}

/* o_h = o_lat_h W_uv_h   (N, dv) per head: W_uv_h is w_uv[:, h, :], (m, dv) with row stride H dv. */
static void absorb_w_uv(const MlaProblem *p, const float *o_lat, float *o, HbmCounter *hbm)
{
    /* exercise: begin — o_h = o_lat_h W_uv_h, every head (check 09: y.npy of every mla_* case) | stub: (void)p, (void)o_lat, (void)o, (void)hbm; */
    const size_t N = (size_t)p->B * p->Tq, H = p->H, dv = p->dv, m = p->m;
    for (size_t h = 0; h < H; h++)
        gemm_counted(hbm, N, dv, m, o_lat + h * m, H * m, 0, p->in[MLA_W_UV] + h * dv, H * dv, o + h * dv,
                     H * dv);
    /* exercise: end */
}

/* Block sizes from M, stage 08's rule with key width m + p and value width m:
 * Bc = M_f / (4 (2m + p)), Br = min(Bc, m + p); --block-r / --block-c win. */
typedef struct {
    size_t M, Br, Bc;
} Blocking;

static Blocking blocking(const MlaProblem *p, const RunCtx *ctx)
{
    Blocking b;
    b.M = ctx->sram_bytes > 0 ? ctx->sram_bytes : FLASHLAB_DEFAULT_SRAM_BYTES;
    const size_t M_f = b.M / sizeof(float);
    b.Bc = ctx->block_c > 0 ? (size_t)ctx->block_c : max_size(1, M_f / (4 * (size_t)(2 * p->m + p->p)));
    b.Br = ctx->block_r > 0 ? (size_t)ctx->block_r : max_size(1, min_size(b.Bc, (size_t)(p->m + p->p)));
    return b;
}

/* One worker's tiles in its SRAM arena. The cache tile Kc is both the keys' latent part and the
 * values: no V tile. */
typedef struct {
    float *Ql, *Qp; /* query rows: latent part (Br, m), RoPE part (Br, p) */
    float *Kc, *Kp; /* cache rows: ckv_j (Bc, m) = keys' latent part = values, kpe_j (Bc, p) */
    float *O;       /* Õ, then O   (Br, m) */
    float *S;       /* scores, then P~   (Br, Bc) */
    float *mx, *l, *alpha; /* running max, sum, rescale   (Br) */
} Tiles;

static int tiles_alloc(SramArena *a, const MlaProblem *p, const Blocking *b, Tiles *s)
{
    const size_t m = p->m, pe = p->p, Br = b->Br, Bc = b->Bc;
    s->Ql = sram_alloc(a, Br * m);
    s->Qp = sram_alloc(a, Br * pe);
    s->Kc = sram_alloc(a, Bc * m);
    s->Kp = sram_alloc(a, Bc * pe);
    s->O = sram_alloc(a, Br * m);
    s->S = sram_alloc(a, Br * Bc);
    s->mx = sram_alloc(a, Br);
    s->l = sram_alloc(a, Br);
    s->alpha = sram_alloc(a, Br);
    return s->Ql && s->Qp && s->Kc && s->Kp && s->O && s->S && s->mx && s->l && s->alpha;
}

/* Online softmax of one row of n scores, unnormalised (stage 05): a <- exp(a - m_new),
 * l <- exp(m - m_new) l + rowsum a, *alpha = exp(m - m_new). Every row sees >= 1 key (Tq <= Tk). */
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
    *alpha = expf(*m - m_new);
    *l = *l * *alpha + row_sum;
    *m = m_new;
}

/* FA2 over the cache of batch b for the stacked rows r0 .. r0 + rows - 1 (rope.h): the block
 * reads each cache tile once, for all of its rows' heads. Writes o_lat of those rows. */
static void latent_block(const MlaProblem *p, const AbsorbedBuffers *w, size_t b, size_t r0, size_t rows,
                         const Tiles *s, const Blocking *bl, HbmCounter *hbm)
{
    const size_t m = p->m, pe = p->p, H = p->H, Bc = bl->Bc, R = (size_t)p->Tq * H;
    const size_t row0 = b * R + r0; /* first row in the (N, H) layout of q_lat and o_lat */
    const size_t n_keys = (size_t)keys_seen(p->causal, (int)(r0 + rows - 1), p->H, p->Tq, p->Tk);
    const float *ckv = p->in[MLA_CKV] + b * p->Tk * m, *kpe = p->in[MLA_KPE] + b * p->Tk * pe;

    hbm_load(hbm, s->Ql, w->q_lat + row0 * m, rows * m); /* [q_lat, q_pe]: read once */
    hbm_load(hbm, s->Qp, w->q_pe + row0 * pe, rows * pe);
    for (size_t i = 0; i < rows; i++) {
        s->mx[i] = -INFINITY, s->l[i] = 0.0f;
        memset(s->O + i * m, 0, m * sizeof(float));
    }
    for (size_t j0 = 0; j0 < n_keys; j0 += Bc) {
        const size_t n = min_size(Bc, n_keys - j0);
        hbm_load(hbm, s->Kc, ckv + j0 * m, n * m); /* the cache tile: keys and values at once */
        hbm_load(hbm, s->Kp, kpe + j0 * pe, n * pe);
        // S = scale (Q_lat Kc^T + Q_pe Kp^T)   (rows, n)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)n, (int)m, p->scale, s->Ql,
                    (int)m, s->Kc, (int)m, 0.0f, s->S, (int)n);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)n, (int)pe, p->scale, s->Qp,
                    (int)pe, s->Kp, (int)pe, 1.0f, s->S, (int)n);
        for (size_t i = 0; i < rows; i++) {
            const size_t seen = (size_t)keys_seen(p->causal, (int)(r0 + i), p->H, p->Tq, p->Tk);
            for (size_t j = seen > j0 ? seen - j0 : 0; j < n; j++)
                s->S[i * n + j] = -INFINITY; /* past the row's position (causal) */
            online_softmax_row(s->S + i * n, n, &s->mx[i], &s->l[i], &s->alpha[i]);
            /* Õ *= alpha; a loop, not cblas_sscal: OpenBLAS's sscal writes zeros for an alpha of 0
             * or NaN whatever x holds, and a NaN must come through */
            for (size_t c = 0; c < m; c++)
                s->O[i * m + c] *= s->alpha[i];
        }
        // Õ += P~ Kc: the same tile, now as values   (rows, m)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)m, (int)n, 1.0f, s->S, (int)n, s->Kc,
                    (int)m, 1.0f, s->O, (int)m);
    }
    for (size_t i = 0; i < rows; i++) /* O = Õ / l: a loop for the same reason as above */
        for (size_t c = 0; c < m; c++)
            s->O[i * m + c] *= 1.0f / s->l[i];
    hbm_store(hbm, w->o_lat + row0 * m, s->O, rows * m);
}

/* Every (batch, block of Br stacked rows) is one work item; each worker has its own arena. */
static int latent_attention(const MlaProblem *p, const AbsorbedBuffers *w, const RunCtx *ctx, FlError *err)
{
    const Blocking bl = blocking(p, ctx);
    const size_t R = (size_t)p->Tq * p->H, per_batch = (R + bl.Br - 1) / bl.Br, items = (size_t)p->B * per_batch;
    const int workers = (int)max_size(1, min_size((size_t)(ctx->threads > 0 ? ctx->threads : 1), items));
    int failed = 0;
    blas_threads_push(1);
#pragma omp parallel num_threads(workers)
    {
        SramArena arena;
        Tiles s = {0};
        const int ok = sram_init(&arena, bl.M) == 0 && tiles_alloc(&arena, p, &bl, &s);
        if (!ok) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic)
        for (long it = 0; it < (long)items; it++) {
            const size_t b = (size_t)it / per_batch, r0 = ((size_t)it % per_batch) * bl.Br;
            if (ok)
                latent_block(p, w, b, r0, min_size(bl.Br, R - r0), &s, &bl, ctx->hbm);
        }
        sram_free(&arena);
    }
    blas_threads_pop();
    if (failed)
        return fl_fail(err, FL_BAD_INPUT,
                       "stage 09: tiles Br = %zu, Bc = %zu with key width m + p = %d and value width m = %d "
                       "do not fit in the SRAM of M = %zu bytes (--sram, --block-r, --block-c)",
                       bl.Br, bl.Bc, p->m + p->p, p->m, bl.M);
    return FL_OK;
}

static int absorbed_forward(const MlaProblem *p, float *y, RunCtx *ctx, FlError *err)
{
    AbsorbedBuffers w;
    absorbed_buffers(p, ctx->workspace, &w);
    project_queries(p, w.c_q, w.q_nope, w.q_pe, ctx->hbm);
    absorb_w_uk(p, w.q_nope, w.q_lat, ctx->hbm);
    int rc = latent_attention(p, &w, ctx, err);
    if (rc != FL_OK)
        return rc;
    absorb_w_uv(p, w.o_lat, w.o, ctx->hbm);
    output_projection(p, w.o, y, ctx->hbm);
    return FL_OK;
}

static const MlaEntry absorbed_entry = {"mla", absorbed_forward, absorbed_workspace_bytes};
static const MlaEntry naive_entry = {"mla", naive_forward, naive_workspace_bytes};

static const StageImpl mla_cpu_absorbed = {
    .stage = "09", .name = "mla", .variant = "", .device = DEVICE_CPU,
    .lesson = "MLA, absorbed: W_uk folded into the query, W_uv into the output; MQA straight over the latent cache",
    .kind_entry = &absorbed_entry, .precision = PRECISION_F32,
};

static const StageImpl mla_cpu_naive = {
    .stage = "09", .name = "mla", .variant = "naive", .device = DEVICE_CPU,
    .lesson = "MLA, naive: the latent cache up-projected to per-head K and V every step, then stage 08 attention",
    .kind_entry = &naive_entry, .precision = PRECISION_F32,
};

const StageImpl *const stage09_mla_cpu[] = {&mla_cpu_absorbed, &mla_cpu_naive, NULL};
