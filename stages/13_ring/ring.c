/* stages/13_ring/ring.c — ring attention (context parallelism) with P ranks on the CPU, forward.
 *
 * When one sequence no longer fits one device, its rows are spread over P ranks. Each rank keeps
 * its share of Q (and of the output) and its share of K and V; the K/V shares travel around a ring
 * of ranks, so that after P steps every rank has attended its queries to every key. A rank merges
 * the partial result of each step into its output with the logsumexps, the merge of stage 11's
 * split-KV, now between ranks:
 *   lse = log(exp(lse_acc) + exp(lse_s)),   O = exp(lse_acc - lse) O_acc + exp(lse_s - lse) O_s
 *
 * The balanced split. The sequence is cut into 2P chunks (queries and keys alike: chunk c of n rows
 * is [c n / 2P, (c + 1) n / 2P)); rank r holds chunks r and 2P - 1 - r. With the causal mask, query
 * chunk c sees about c + 1/2 chunks of keys, so rank r's work is (r + 1/2) + (2P - 1 - r + 1/2) = 2P
 * chunk pairs whatever r is: no rank waits for another at the end of a step. (With contiguous
 * shares, rank P - 1 would do 2P - 1 times the work of rank 0.)
 *
 * One step s = 0 .. P - 1 of rank r: it holds the K/V shard of rank (r - s) mod P; for each of its
 * query chunks, each head, and each of the held key chunks that some query of the chunk sees, it runs
 * FA2's forward over that key chunk (tiles of Bc keys in its SRAM arena of M bytes, masked where
 * the chunk pair crosses the diagonal) and merges the result into o and lse. Then it sends the held
 * shard to rank r + 1 and receives rank r - 1's (except after the last step).
 *
 * Ranks are OpenMP threads here (RunCtx.ranks, `--ranks P`; a rank may hold empty chunks when a
 * sequence has fewer than 2P rows). The link between ranks is a counted copy into the next rank's
 * inbox (RankCounter: bytes sent and received), the CPU stand-in for NCCL send/recv between GPUs.
 * HBM is counted per rank: each rank's Q, K/V tiles, and the reads and writes of the merge into its
 * own rows of o and lse. Handing out the shards before the first step (a copy of each rank's
 * chunks of k and v into its buffer) is not counted: on GPUs the shards are already where they
 * live. docs/hbm_model.md gives the closed forms. GQA: query head h reads kv head h / (Hq / Hkv);
 * every kv head travels. Supports the causal mask, Hq != Hkv and Tq != Tk (query row i at
 * position i + Tk - Tq).
 *
 * Backward: D = rowsum(dO ∘ O) and dQ = 0 for the rank's rows, then the same P steps with the
 * shard carrying dK and dV along with K and V: each rank adds its queries' share of dK and dV
 * (FA2's backward over the chunk pair, key tiles outer) and sums its own dQ. The shards go round
 * once more at the end (dK and dV only) so that every rank gets its own keys' gradients back. */

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "hbm.h"
#include "parallel.h"
#include "split.h"

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

static int rank_count(const RunCtx *ctx) { return ctx->ranks > 0 ? ctx->ranks : 1; }

/* The balanced split (chunk_rows, rank_chunk) is split.h's, shared with the GPU side. */

/* ---- a K/V shard: the two key chunks of one rank, every (b, kv head) ------------------------ */

/* In a shard buffer, chunk `which` of (b, kv head g) starts after the rows of all the chunks before
 * it: the first chunk's rows of every g, then the second's. */
typedef struct {
    int owner;        /* the rank whose chunks these are */
    float *k, *v;     /* (rows of chunk 0 + rows of chunk 1) * B * Hkv rows of d, dv floats */
    float *dk, *dv;   /* the backward's dK, dV of the same rows, summed as the shard travels; or NULL */
} Shard;

static size_t shard_rows(const AttnProblem *p, int P, int owner)
{
    size_t n = 0;
    for (int which = 0; which < 2; which++) {
        const Rows c = chunk_rows((size_t)p->Tk, P, rank_chunk(P, owner, which));
        n += c.hi - c.lo;
    }
    return n * (size_t)p->B * p->Hkv;
}

/* First row of chunk `which` of kv head g (= b * Hkv + kv head) inside a shard of `owner`. */
static size_t shard_row0(const AttnProblem *p, int P, int owner, int which, size_t g)
{
    const Rows c0 = chunk_rows((size_t)p->Tk, P, rank_chunk(P, owner, 0));
    const Rows c = chunk_rows((size_t)p->Tk, P, rank_chunk(P, owner, which));
    const size_t before = which == 0 ? 0 : (c0.hi - c0.lo) * (size_t)p->B * p->Hkv;
    return before + g * (c.hi - c.lo);
}

/* Hands out rank r's chunks of k and v into its shard buffer (not counted: see the top); dK = dV
 * = 0 for the backward. */
static void shard_fill(const AttnProblem *p, int P, Shard *s)
{
    if (s->dk) {
        const size_t rows = shard_rows(p, P, s->owner);
        memset(s->dk, 0, rows * p->d * sizeof(float));
        memset(s->dv, 0, rows * p->dv * sizeof(float));
    }
    const size_t G = (size_t)p->B * p->Hkv, Tk = (size_t)p->Tk;
    for (int which = 0; which < 2; which++) {
        const Rows c = chunk_rows(Tk, P, rank_chunk(P, s->owner, which));
        for (size_t g = 0; g < G; g++) {
            const size_t to = shard_row0(p, P, s->owner, which, g), n = c.hi - c.lo;
            memcpy(s->k + to * p->d, p->k + (g * Tk + c.lo) * p->d, n * p->d * sizeof(float));
            memcpy(s->v + to * p->dv, p->v + (g * Tk + c.lo) * p->dv, n * p->dv * sizeof(float));
        }
    }
}

/* The link: sends a shard into the next rank's inbox, its K and V when with_kv, its dK and dV when
 * it has them; counts the bytes on both ends. */
static void link_send(const AttnProblem *p, int P, const Shard *from, Shard *to, int with_kv,
                      RankCounter *sender, RankCounter *receiver)
{
    const size_t rows = shard_rows(p, P, from->owner);
    uint64_t floats = 0;
    if (with_kv) {
        memcpy(to->k, from->k, rows * p->d * sizeof(float));
        memcpy(to->v, from->v, rows * p->dv * sizeof(float));
        floats += rows * (size_t)(p->d + p->dv);
    }
    if (from->dk) {
        memcpy(to->dk, from->dk, rows * p->d * sizeof(float));
        memcpy(to->dv, from->dv, rows * p->dv * sizeof(float));
        floats += rows * (size_t)(p->d + p->dv);
    }
    to->owner = from->owner;
    const uint64_t bytes = floats * sizeof(float);
    if (sender)
        sender->link_sent += bytes;
    if (receiver)
        receiver->link_received += bytes;
}

/* ---- one chunk pair: FA2 over a key chunk, merged into o and lse ----------------------------- */

typedef struct {
    size_t M, Br, Bc;
} Blocking;

/* Stage 07's rule: Bc = M / (4 (d + dv)), Br = min(Bc, d); --block-r / --block-c win. */
static Blocking blocking(const AttnProblem *p, const RunCtx *ctx)
{
    Blocking b;
    b.M = ctx->sram_bytes > 0 ? ctx->sram_bytes : FLASHLAB_DEFAULT_SRAM_BYTES;
    const size_t M_f = b.M / sizeof(float);
    b.Bc = ctx->block_c > 0 ? (size_t)ctx->block_c : max_size(1, M_f / (4 * (size_t)(p->d + p->dv)));
    b.Br = ctx->block_r > 0 ? (size_t)ctx->block_r : max_size(1, min_size(b.Bc, (size_t)p->d));
    return b;
}

/* One rank's tiles, inside its SRAM arena of M bytes. */
typedef struct {
    float *K, *V;         /* K_j (Bc, d)   V_j (Bc, dv) */
    float *Q, *O;         /* Q_i (Br, d)   Õ_i, then this step's O_s (Br, dv) */
    float *S;             /* scores, then P~   (Br, Bc) */
    float *m, *l, *alpha; /* running max, sum, rescale   (Br) */
    float *lse;           /* this step's lse_s   (Br) */
    float *acc, *lse_acc; /* o and lse of the rows so far, loaded for the merge   (Br, dv), (Br) */
} Tiles;

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
    s->acc = sram_alloc(a, Br * dv);
    s->lse_acc = sram_alloc(a, Br);
    return s->K && s->V && s->Q && s->O && s->S && s->m && s->l && s->alpha && s->lse && s->acc && s->lse_acc;
}

/* The keys query row i sees end at end_of(i) = i + Tk - Tq + 1 with the causal mask (none below
 * 0), else at Tk. */
static long keys_end(const AttnProblem *p, size_t i)
{
    if (!p->causal)
        return p->Tk;
    const long e = (long)i + p->Tk - p->Tq + 1;
    return e < 0 ? 0 : e;
}

/* Online softmax of one row of scores (n keys) against the running m, l; see stage 05. */
static void online_softmax_row(float *a, size_t n, float *m, float *l, float *alpha)
{
    float m_new = *m;
    for (size_t j = 0; j < n; j++)
        m_new = fmaxf(m_new, a[j]);
    const float m_ref = m_new == -INFINITY ? 0.0f : m_new; /* no key seen yet: stay finite */
    float row_sum = 0.0f;
    for (size_t j = 0; j < n; j++) {
        a[j] = expf(a[j] - m_ref);
        row_sum += a[j];
    }
    *alpha = expf(*m - m_ref);
    *l = *l * *alpha + row_sum;
    *m = m_new;
}

/* The merge of a step's result (O_s, lse_s in the tiles) into the rows' o and lse so far:
 * lse = log(exp(lse_acc) + exp(lse_s)), o = exp(lse_acc - lse) o_acc + exp(lse_s - lse) O_s. */
static void merge_rows(const Tiles *s, size_t rows, size_t dv, float *o, float *lse, HbmCounter *hbm)
{
    hbm_load(hbm, s->acc, o, rows * dv);
    hbm_load(hbm, s->lse_acc, lse, rows);
    /* exercise: begin — merge row i: lse = log(exp(lse_acc) + exp(lse_s)), acc = the weighted sum of acc and O_s (check 13 --ranks 2: o and lse of every case) */
    for (size_t i = 0; i < rows; i++) {
        const float a = s->lse_acc[i], b = s->lse[i];
        const float hi = fmaxf(a, b), ref = hi == -INFINITY ? 0.0f : hi; /* neither saw a key: shift by 0 */
        const float sum = expf(a - ref) + expf(b - ref); /* NaN when a or b is, which fmaxf passed over */
        const float total = sum == 0.0f ? -INFINITY : ref + logf(sum);
        const float wa = total == -INFINITY ? 0.0f : expf(a - total);
        const float wb = total == -INFINITY ? 0.0f : expf(b - total);
        for (size_t c = 0; c < dv; c++)
            s->acc[i * dv + c] = wa * s->acc[i * dv + c] + wb * s->O[i * dv + c];
        s->lse[i] = total;
    }
    /* exercise: end */
    hbm_store(hbm, o, s->acc, rows * dv);
    hbm_store(hbm, lse, s->lse, rows);
}

/* Query rows [q.lo, q.hi) of query head h of batch b against the held key chunk of key rows
 * [kc.lo, kc.hi) (at `k`, `v` in the shard), merged into o and lse. Skips the pair when no query
 * sees any of its keys; within it, key tiles past a query tile's last visible key are not loaded. */
static void chunk_pair(const AttnProblem *p, AttnTensors *t, size_t bh, Rows q, Rows kc, const float *k,
                       const float *v, const Blocking *b, const Tiles *s, HbmCounter *hbm)
{
    const size_t d = p->d, dv = p->dv;
    if (q.hi <= q.lo || kc.hi <= kc.lo || keys_end(p, q.hi - 1) <= (long)kc.lo)
        return; /* the pair is empty, or every key of the chunk is after every query's position */
    for (size_t i0 = q.lo; i0 < q.hi; i0 += b->Br) {
        const size_t rows = min_size(b->Br, q.hi - i0);
        const long last = keys_end(p, i0 + rows - 1); /* the tile's furthest row sees keys < last */
        if (last <= (long)kc.lo)
            continue;
        const size_t k_end = min_size(kc.hi, (size_t)last);
        hbm_load(hbm, s->Q, p->q + (bh * p->Tq + i0) * d, rows * d);
        for (size_t i = 0; i < rows; i++) {
            for (size_t c = 0; c < dv; c++)
                s->O[i * dv + c] = 0.0f;
            s->m[i] = -INFINITY;
            s->l[i] = 0.0f;
        }
        for (size_t j0 = kc.lo; j0 < k_end; j0 += b->Bc) {
            const size_t n = min_size(b->Bc, k_end - j0);
            hbm_load(hbm, s->K, k + (j0 - kc.lo) * d, n * d);
            hbm_load(hbm, s->V, v + (j0 - kc.lo) * dv, n * dv);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)n, (int)d, p->scale, s->Q,
                        (int)d, s->K, (int)d, 0.0f, s->S, (int)n);
            for (size_t i = 0; i < rows; i++) { /* the causal mask, by absolute positions */
                const long end = keys_end(p, i0 + i);
                for (size_t j = 0; j < n; j++)
                    if ((long)(j0 + j) >= end)
                        s->S[i * n + j] = -INFINITY;
                online_softmax_row(s->S + i * n, n, &s->m[i], &s->l[i], &s->alpha[i]);
                for (size_t c = 0; c < dv; c++)
                    s->O[i * dv + c] *= s->alpha[i];
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)dv, (int)n, 1.0f, s->S,
                        (int)n, s->V, (int)dv, 1.0f, s->O, (int)dv);
        }
        for (size_t i = 0; i < rows; i++) { /* this step's O_s = Õ / l, lse_s = m + log l */
            const int empty = s->l[i] == 0.0f;
            for (size_t c = 0; c < dv; c++)
                s->O[i * dv + c] *= empty ? 0.0f : 1.0f / s->l[i];
            s->lse[i] = empty ? -INFINITY : s->m[i] + logf(s->l[i]);
        }
        merge_rows(s, rows, dv, t->o + (bh * p->Tq + i0) * dv, t->lse + bh * p->Tq + i0, hbm);
    }
}

/* ---- one chunk pair, backward --------------------------------------------------------------- */

/* One rank's backward tiles, inside its SRAM arena of M bytes. */
typedef struct {
    float *K, *V, *dK, *dV; /* K_j, V_j and the shard's dK_j, dV_j   (Bc, d|dv) */
    float *Q, *dO, *dQ;     /* Q_i, dO_i, dQ_i   (Br, d|dv) */
    float *P, *dP;          /* P, then dS; dP   (Br, Bc) */
    float *lse, *D;         /* lse_i, D_i   (Br) */
} GradTiles;

/* The forward's Bc halved (four key tiles live at once), and the largest Br <= min(Bc, d) that
 * fits: M_f >= 2 Bc (d + dv) + Br (2d + dv) + 2 Br Bc + 2 Br. --block-r / --block-c win. */
static Blocking grad_blocking(const AttnProblem *p, const RunCtx *ctx)
{
    Blocking b = blocking(p, ctx);
    const size_t M_f = b.M / sizeof(float), d = p->d, dv = p->dv;
    if (ctx->block_c <= 0)
        b.Bc = max_size(1, b.Bc / 2);
    if (ctx->block_r <= 0) {
        const size_t kv = 2 * b.Bc * (d + dv), per_row = 2 * d + dv + 2 * b.Bc + 2;
        b.Br = max_size(1, min_size(min_size(b.Bc, d), M_f > kv ? (M_f - kv) / per_row : 1));
    }
    return b;
}

static int grad_tiles_alloc(SramArena *a, const AttnProblem *p, const Blocking *b, GradTiles *s)
{
    const size_t d = p->d, dv = p->dv, Br = b->Br, Bc = b->Bc;
    s->K = sram_alloc(a, Bc * d);
    s->V = sram_alloc(a, Bc * dv);
    s->dK = sram_alloc(a, Bc * d);
    s->dV = sram_alloc(a, Bc * dv);
    s->Q = sram_alloc(a, Br * d);
    s->dO = sram_alloc(a, Br * dv);
    s->dQ = sram_alloc(a, Br * d);
    s->P = sram_alloc(a, Br * Bc);
    s->dP = sram_alloc(a, Br * Bc);
    s->lse = sram_alloc(a, Br);
    s->D = sram_alloc(a, Br);
    return s->K && s->V && s->dK && s->dV && s->Q && s->dO && s->dQ && s->P && s->dP && s->lse && s->D;
}

/* The gradients of one query tile [i0, i0 + rows) against key tile [j0, j0 + n) (in the tiles):
 *   P = exp(scale Q K^T - lse) (0 past each row's keys), dV += P^T dO, dP = dO V^T,
 *   dS = P ∘ (dP - D), dK += scale dS^T Q, dQ += scale dS K. */
static void grad_tile(const AttnProblem *p, size_t i0, size_t rows, size_t j0, size_t n, const GradTiles *s)
{
    const int d = p->d, dv = p->dv;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)n, d, p->scale, s->Q, d, s->K, d, 0.0f,
                s->P, (int)n);
    for (size_t i = 0; i < rows; i++) {
        const long end = keys_end(p, i0 + i);
        for (size_t j = 0; j < n; j++)
            s->P[i * n + j] = (long)(j0 + j) >= end || s->lse[i] == -INFINITY ? 0.0f
                                                                                : expf(s->P[i * n + j] - s->lse[i]);
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n, dv, (int)rows, 1.0f, s->P, (int)n, s->dO, dv, 1.0f,
                s->dV, dv);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)n, dv, 1.0f, s->dO, dv, s->V, dv, 0.0f,
                s->dP, (int)n);
    /* exercise: begin — dS = P ∘ (dP - D), in place of P (check 13 --ranks 2: dq and dk of the backward cases) */
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < n; j++)
            s->P[i * n + j] *= s->dP[i * n + j] - s->D[i];
    /* exercise: end */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n, d, (int)rows, p->scale, s->P, (int)n, s->Q, d, 1.0f,
                s->dK, d);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, d, (int)n, p->scale, s->P, (int)n, s->K, d,
                1.0f, s->dQ, d);
}

/* The backward of query rows q of query head bh against the held key chunk kc: key tiles outer
 * (K_j, V_j, dK_j, dV_j loaded once), query tiles inner from the first whose last row sees K_j's
 * first key; dQ_i read, added to and written back. D is the workspace's rowsum(dO ∘ O). */
static void chunk_pair_bwd(const AttnProblem *p, AttnTensors *t, const float *D, size_t bh, Rows q, Rows kc,
                           const Shard *held, size_t row0, const Blocking *b, const GradTiles *s, HbmCounter *hbm)
{
    const size_t d = p->d, dv = p->dv;
    if (q.hi <= q.lo || kc.hi <= kc.lo || keys_end(p, q.hi - 1) <= (long)kc.lo)
        return;
    const size_t k_end = min_size(kc.hi, (size_t)keys_end(p, q.hi - 1));
    for (size_t j0 = kc.lo; j0 < k_end; j0 += b->Bc) {
        const size_t n = min_size(b->Bc, k_end - j0), at = row0 + (j0 - kc.lo);
        hbm_load(hbm, s->K, held->k + at * d, n * d);
        hbm_load(hbm, s->V, held->v + at * dv, n * dv);
        hbm_load(hbm, s->dK, held->dk + at * d, n * d);
        hbm_load(hbm, s->dV, held->dv + at * dv, n * dv);
        for (size_t i0 = q.lo; i0 < q.hi; i0 += b->Br) {
            const size_t rows = min_size(b->Br, q.hi - i0), row = bh * p->Tq + i0;
            if (keys_end(p, i0 + rows - 1) <= (long)j0)
                continue; /* no row of this tile reaches K_j */
            hbm_load(hbm, s->Q, p->q + row * d, rows * d);
            hbm_load(hbm, s->dO, p->dout + row * dv, rows * dv);
            hbm_load(hbm, s->lse, t->lse + row, rows);
            hbm_load(hbm, s->D, D + row, rows);
            hbm_load(hbm, s->dQ, t->dq + row * d, rows * d);
            grad_tile(p, i0, rows, j0, n, s);
            hbm_store(hbm, t->dq + row * d, s->dQ, rows * d);
        }
        hbm_store(hbm, held->dk + at * d, s->dK, n * d);
        hbm_store(hbm, held->dv + at * dv, s->dV, n * dv);
    }
}

/* ---- a rank's steps --------------------------------------------------------------------------- */

/* The kv head g = b Hkv + j of query head bh = b Hq + h. */
static size_t kv_head_of(const AttnProblem *p, size_t bh)
{
    const size_t group = (size_t)(p->Hq / p->Hkv);
    return bh / (size_t)p->Hq * (size_t)p->Hkv + bh % (size_t)p->Hq / group;
}

/* Before the forward's steps: o = 0, lse = -inf for rank r's rows (merged into from then on). */
static void rank_clear_rows(const AttnProblem *p, AttnTensors *t, int P, int r, HbmCounter *hbm)
{
    for (size_t bh = 0; bh < (size_t)p->B * p->Hq; bh++)
        for (int w = 0; w < 2; w++) {
            const Rows q = chunk_rows((size_t)p->Tq, P, rank_chunk(P, r, w));
            for (size_t i = q.lo; i < q.hi; i++) {
                memset(t->o + (bh * p->Tq + i) * p->dv, 0, (size_t)p->dv * sizeof(float));
                t->lse[bh * p->Tq + i] = -INFINITY;
            }
            hbm_count_write(hbm, (uint64_t)(q.hi - q.lo) * (uint64_t)(p->dv + 1) * sizeof(float));
        }
}

/* Before the backward's steps: D = rowsum(dO ∘ O) and dQ = 0 for rank r's rows. */
static void rank_prepare_grads(const AttnProblem *p, AttnTensors *t, float *D, int P, int r, HbmCounter *hbm)
{
    const size_t dv = (size_t)p->dv;
    for (size_t bh = 0; bh < (size_t)p->B * p->Hq; bh++)
        for (int w = 0; w < 2; w++) {
            const Rows q = chunk_rows((size_t)p->Tq, P, rank_chunk(P, r, w));
            for (size_t i = q.lo; i < q.hi; i++) {
                const size_t row = bh * p->Tq + i;
                double acc = 0.0;
                for (size_t c = 0; c < dv; c++)
                    acc += (double)p->dout[row * dv + c] * t->o[row * dv + c];
                D[row] = (float)acc;
                memset(t->dq + row * p->d, 0, (size_t)p->d * sizeof(float));
            }
            const uint64_t n = q.hi - q.lo;
            hbm_count_read(hbm, n * 2 * dv * sizeof(float));
            hbm_count_write(hbm, n * (1 + (uint64_t)p->d) * sizeof(float));
        }
}

/* After the backward's steps rank r holds its own shard again, dK and dV complete: copied into
 * its rows of dk and dv (read from the shard, written to the outputs). */
static void rank_store_grads(const AttnProblem *p, AttnTensors *t, int P, int r, const Shard *own, HbmCounter *hbm)
{
    const size_t G = (size_t)p->B * p->Hkv, Tk = (size_t)p->Tk;
    for (int which = 0; which < 2; which++) {
        const Rows c = chunk_rows(Tk, P, rank_chunk(P, r, which));
        for (size_t g = 0; g < G; g++) {
            const size_t from = shard_row0(p, P, r, which, g), n = c.hi - c.lo;
            memcpy(t->dk + (g * Tk + c.lo) * p->d, own->dk + from * p->d, n * p->d * sizeof(float));
            memcpy(t->dv + (g * Tk + c.lo) * p->dv, own->dv + from * p->dv, n * p->dv * sizeof(float));
            const uint64_t bytes = (uint64_t)n * (uint64_t)(p->d + p->dv) * sizeof(float);
            hbm_count_read(hbm, bytes);
            hbm_count_write(hbm, bytes);
        }
    }
}

/* ---- the ring ---------------------------------------------------------------------------------- */

/* Everything the ranks share: their arenas and tiles, their held and received shards, counts. */
typedef struct {
    int P;
    Direction dir;
    Blocking b;
    SramArena *arenas;
    Tiles *tiles;         /* forward */
    GradTiles *grad;      /* backward */
    Shard *held, *inbox;
    HbmCounter *counted;  /* per rank */
    float *D;             /* backward: rowsum(dO ∘ O) of every row */
    int arenas_made;
} Ring;

/* Floats of one shard buffer: the largest shard's K and V (and dK, dV for the backward). */
static size_t shard_floats(const AttnProblem *p, int P, Direction dir)
{
    size_t most = 0;
    for (int r = 0; r < P; r++)
        most = max_size(most, shard_rows(p, P, r));
    return most * (size_t)(p->d + p->dv) * (dir == DIR_BWD ? 2 : 1);
}

/* Every rank's two shard buffers (held and received), and for the backward D. */
static size_t ring_workspace_bytes(const AttnProblem *p, const RunCtx *ctx, Direction dir)
{
    const int P = rank_count(ctx);
    const size_t D = dir == DIR_BWD ? (size_t)p->B * p->Hq * p->Tq : 0;
    return ((size_t)P * 2 * shard_floats(p, P, dir) + D) * sizeof(float);
}

/* One shard view over `floats` floats at base: K, V, then dK, dV for the backward. */
static Shard shard_at(const AttnProblem *p, int P, Direction dir, float *base, int owner)
{
    const size_t half = shard_floats(p, P, DIR_FWD), rows = half / (size_t)(p->d + p->dv);
    Shard s = {owner, base, base + rows * p->d, NULL, NULL};
    if (dir == DIR_BWD)
        s.dk = base + half, s.dv = base + half + rows * p->d;
    return s;
}

static void ring_free(Ring *g)
{
    for (int r = 0; r < g->arenas_made; r++)
        sram_free(&g->arenas[r]);
    free(g->arenas);
    free(g->tiles);
    free(g->grad);
    free(g->held);
    free(g->inbox);
    free(g->counted);
}

static int ring_setup(const AttnProblem *p, RunCtx *ctx, Direction dir, Ring *g, FlError *err)
{
    memset(g, 0, sizeof *g);
    const int P = rank_count(ctx);
    g->P = P, g->dir = dir;
    g->b = dir == DIR_FWD ? blocking(p, ctx) : grad_blocking(p, ctx);
    g->arenas = calloc((size_t)P, sizeof *g->arenas);
    g->tiles = calloc((size_t)P, sizeof *g->tiles);
    g->grad = calloc((size_t)P, sizeof *g->grad);
    g->held = calloc((size_t)P, sizeof *g->held);
    g->inbox = calloc((size_t)P, sizeof *g->inbox);
    g->counted = calloc((size_t)P, sizeof *g->counted);
    int ok = g->arenas && g->tiles && g->grad && g->held && g->inbox && g->counted;
    for (; ok && g->arenas_made < P; g->arenas_made++) {
        const int r = g->arenas_made;
        ok = sram_init(&g->arenas[r], g->b.M) == 0 &&
             (dir == DIR_FWD ? tiles_alloc(&g->arenas[r], p, &g->b, &g->tiles[r])
                             : grad_tiles_alloc(&g->arenas[r], p, &g->b, &g->grad[r]));
    }
    if (!ok)
        return fl_fail(err, FL_BAD_INPUT,
                       "ring: out of host memory, or the %s tiles do not fit in SRAM: M=%zu bytes, Br=%zu, Bc=%zu, "
                       "d=%d, dv=%d; raise --sram or lower the block sizes",
                       dir == DIR_FWD ? "forward" : "backward", g->b.M, g->b.Br, g->b.Bc, p->d, p->dv);
    float *buffers = (float *)ctx->workspace;
    const size_t per = shard_floats(p, P, dir);
    for (int r = 0; r < P; r++) { /* held = own shard, inbox = the second buffer */
        g->held[r] = shard_at(p, P, dir, buffers + (size_t)(2 * r) * per, r);
        g->inbox[r] = shard_at(p, P, dir, buffers + (size_t)(2 * r + 1) * per, -1);
        shard_fill(p, P, &g->held[r]);
    }
    g->D = dir == DIR_BWD ? buffers + (size_t)(2 * P) * per : NULL;
    return FL_OK;
}

/* Step s of rank r: its two query chunks against the two key chunks of the shard it holds, every
 * head; the forward (chunk_pair) or the backward (chunk_pair_bwd) of each chunk pair. */
static void rank_step(const AttnProblem *p, AttnTensors *t, const Ring *g, int r, HbmCounter *hbm)
{
    const int P = g->P;
    const Shard *held = &g->held[r];
    for (size_t bh = 0; bh < (size_t)p->B * p->Hq; bh++)
        for (int qw = 0; qw < 2; qw++) {
            const Rows q = chunk_rows((size_t)p->Tq, P, rank_chunk(P, r, qw));
            for (int kw = 0; kw < 2; kw++) {
                const Rows kc = chunk_rows((size_t)p->Tk, P, rank_chunk(P, held->owner, kw));
                const size_t row0 = shard_row0(p, P, held->owner, kw, kv_head_of(p, bh));
                if (g->dir == DIR_FWD)
                    chunk_pair(p, t, bh, q, kc, held->k + row0 * p->d, held->v + row0 * p->dv, &g->b, &g->tiles[r],
                               hbm);
                else
                    chunk_pair_bwd(p, t, g->D, bh, q, kc, held, row0, &g->b, &g->grad[r], hbm);
            }
        }
}

/* Rank r's whole pass: P steps, each followed by a send to rank r + 1 and a receive from r - 1
 * (the barrier is the exchange: every send of a step lands before any rank goes on). The forward
 * sends P - 1 times; the backward's shards go round once more so that dK, dV come home. */
static void rank_run(const AttnProblem *p, AttnTensors *t, Ring *g, int r, RankCounter *out, HbmCounter *hbm)
{
    const int P = g->P, bwd = g->dir == DIR_BWD;
    if (bwd)
        rank_prepare_grads(p, t, g->D, P, r, hbm);
    else
        rank_clear_rows(p, t, P, r, hbm);
    for (int step = 0; step < P; step++) {
        rank_step(p, t, g, r, hbm);
        if (step == P - 1 && (!bwd || P == 1))
            break;
        const int next = (r + 1) % P;
        link_send(p, P, &g->held[r], &g->inbox[next], step < P - 1, out ? &out[r] : NULL, out ? &out[next] : NULL);
#pragma omp barrier
        const Shard swap = g->held[r]; /* the received shard is held now; the old one is the inbox */
        g->held[r] = g->inbox[r];
        g->inbox[r] = swap;
#pragma omp barrier
    }
    if (bwd)
        rank_store_grads(p, t, P, r, &g->held[r], hbm);
}

static int ring_pass(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, Direction dir, FlError *err)
{
    Ring g;
    int rc = ring_setup(p, ctx, dir, &g, err);
    if (rc == FL_OK) {
        RankCounter *out = ctx->rank_counters; /* added to: the caller zeroes it */
        const int counting = ctx->hbm || out;
        blas_threads_push(1);
#pragma omp parallel num_threads(g.P)
        {
            const int r = omp_get_thread_num();
            rank_run(p, t, &g, r, out, counting ? &g.counted[r] : NULL);
        }
        blas_threads_pop();
        for (int r = 0; r < g.P; r++) {
            hbm_count_read(ctx->hbm, g.counted[r].bytes_read);
            hbm_count_write(ctx->hbm, g.counted[r].bytes_written);
            if (out) {
                out[r].hbm.bytes_read += g.counted[r].bytes_read;
                out[r].hbm.bytes_written += g.counted[r].bytes_written;
            }
        }
    }
    ring_free(&g);
    return rc;
}

static int ring_forward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    return ring_pass(p, t, ctx, DIR_FWD, err);
}

static int ring_backward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    return ring_pass(p, t, ctx, DIR_BWD, err);
}

static const StageImpl ring = {
    .stage = "13",
    .name = "ring",
    .variant = "",
    .device = DEVICE_CPU,
    .lesson = "ring attention: P ranks pass K/V shards around a ring, merging (O, lse) at each step",
    .features = FEAT_BACKWARD | FEAT_CAUSAL | FEAT_GQA,
    .forward = ring_forward,
    .backward = ring_backward,
    .workspace_bytes = ring_workspace_bytes, /* every rank's held and received shard (and D) */
};

const StageImpl *const stage13_ring_cpu[] = {&ring, NULL};
