/* fa2.cu — stage 05: FlashAttention-2 as a CUDA kernel, the algorithm on stage 04's thread mapping.
 *
 * Stage 04 ran FlashForward in the FA1 order (K/V chunks outer, one launch per chunk) and sent O,
 * m and l through HBM after every chunk. FlashAttention-2 swaps the loops:
 *   for each query block i (Br rows), in parallel: one thread block per (i, head)
 *     load Q_i to shared memory once; m = -inf, l = 0, Õ = 0 in registers
 *     for each K/V chunk j (Bc keys), in order:
 *       load K_j, V_j to shared memory
 *       S     = scale * Q_i K_j^T                   (Br, Bc)
 *       m_new = max(m, rowmax(S));  P~ = exp(S - m_new)
 *       l     = e^(m - m_new) l + rowsum(P~)
 *       Õ     = e^(m - m_new) Õ + P~ V_j            (unnormalised: no division per chunk)
 *       m     = m_new
 *     O_i = Õ / l and lse_i = m + log(l), written once
 * Q_i is read once and O_i written once, and m, l, Õ never leave the chip: the whole lesson of the
 * stage. The thread mapping is stage 04's (README.md has the picture): a block of 8 warps owns
 * Br = 32 query rows, 4 per warp; lane x scores keys x and x + 32 of a chunk (Bc = 64) and owns
 * output columns x, x+32, x+64, x+96 (dv <= 128), taking each P~ value from the lane that computed
 * it with a shuffle.
 *
 * This kernel is the lesson, not the fast path. The tuned kernel (fa2_tuned.cuh, `--variant tuned`)
 * computes the same thing with the performance machinery that README.md walks as a separate step:
 * cp.async double buffering, register micro-tiles, float4 loads and one configuration per head
 * dimension. Stage 06 builds on the tuned kernel. */
#include <math.h>

#include "attn.h"
#include "cuda_util.h"

enum {
    BR = 32,              /* query rows per block: Q_i (Br, d) */
    BC = 64,              /* keys per chunk: K_j (Bc, d), V_j (Bc, dv) */
    WARPS = 8,
    THREADS = WARPS * 32,
    ROWS_PER_WARP = BR / WARPS,   /* 4 */
    KEYS_PER_LANE = BC / 32,      /* 2 */
    MAX_D = 128,
    COLS_PER_LANE = MAX_D / 32    /* 4: output columns of O_i a lane owns */
};

/* Shared memory of one block, in floats: Q_i (Br x d), K_j (Bc x (d+1)), V_j (Bc x dv).
 * K_j's rows are padded by one float so the 32 lanes, each reading a different key's row at the
 * same column, hit 32 different banks (whenever d+1 is odd). */
static size_t shared_bytes(int d, int dv)
{
    return ((size_t)BR * d + (size_t)BC * (d + 1) + (size_t)BC * dv) * sizeof(float);
}

struct BlockArgs {
    const float *q, *k, *v;
    float *o, *lse;
    int Hq, Hkv, Tq, Tk, d, dv;
    float scale;
    unsigned long long *hbm_dev;
};

static __device__ float warp_max(float x)
{
    for (int offset = 16; offset > 0; offset /= 2)
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
    return x;
}

static __device__ float warp_sum(float x)
{
    for (int offset = 16; offset > 0; offset /= 2)
        x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

/* Copies `rows` contiguous rows of `cols` floats from HBM into shared memory with row pitch
 * `pitch`, all threads of the block together; rows rows..tile_rows-1 of the tile are zeroed (the
 * rows past Tq of the last query block, so every value a warp computes with is defined). */
static __device__ void load_tile(float *dst, int pitch, const float *src, int rows, int tile_rows,
                                 int cols)
{
    for (int idx = threadIdx.x; idx < tile_rows * cols; idx += blockDim.x)
        dst[(idx / cols) * pitch + idx % cols] = idx < rows * cols ? src[idx] : 0.0f;
}

/* One K/V chunk (K_j, V_j in shared memory, `keys` valid keys) against the warp's 4 rows r0.. of
 * Q_i: S, the online-softmax update of m and l, and Õ = alpha Õ + P~ V_j, all in registers. The
 * arithmetic is stage 04's; what changed is where m, l and O live. */
static __device__ void chunk_step(const float *Qs, const float *Ks, const float *Vs, int d, int dv, int keys,
                                  float scale, int r0, int lane, float m[ROWS_PER_WARP], float l[ROWS_PER_WARP],
                                  float o[ROWS_PER_WARP][COLS_PER_LANE])
{
    // S = scale * Q_i K_j^T: lane scores keys lane and lane+32 for the warp's 4 rows   (4, Bc)
    float s[ROWS_PER_WARP][KEYS_PER_LANE];
#pragma unroll
    for (int t = 0; t < KEYS_PER_LANE; t++) {
        const int key = lane + 32 * t;
        float acc[ROWS_PER_WARP] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (key < keys) {
            for (int c = 0; c < d; c++) {
                const float k_c = Ks[key * (d + 1) + c];
#pragma unroll
                for (int rr = 0; rr < ROWS_PER_WARP; rr++)
                    acc[rr] += Qs[(r0 + rr) * d + c] * k_c;
            }
        }
#pragma unroll
        for (int rr = 0; rr < ROWS_PER_WARP; rr++)
            s[rr][t] = key < keys ? acc[rr] * scale : -INFINITY;
    }

    // the online-softmax update of each row, in registers: no HBM round trip
    float alpha[ROWS_PER_WARP];
#pragma unroll
    for (int rr = 0; rr < ROWS_PER_WARP; rr++) {
        // m~ = rowmax(S): the chunk has >= 1 valid key
        float m_tile = -INFINITY;
#pragma unroll
        for (int t = 0; t < KEYS_PER_LANE; t++)
            m_tile = fmaxf(m_tile, s[rr][t]);
        m_tile = warp_max(m_tile);
        /* exercise: begin — the online softmax of row rr in registers: m_new, alpha = e^(m - m_new), P~ = exp(S - m_new) in s, l rescaled and grown, m = m_new (check 05 --device cuda: lse.npy, then o.npy) | stub: alpha[rr] = 1.0f; (void)m_tile; (void)warp_sum; */
        const float m_new = fmaxf(m[rr], m_tile);
        alpha[rr] = expf(m[rr] - m_new); // 0 on the first chunk (m = -inf)
        float l_tile = 0.0f;
#pragma unroll
        for (int t = 0; t < KEYS_PER_LANE; t++) {
            s[rr][t] = expf(s[rr][t] - m_new); // exp(-inf) = 0 for keys past Tk
            l_tile += s[rr][t];
        }
        l[rr] = alpha[rr] * l[rr] + warp_sum(l_tile);
        m[rr] = m_new;
        /* exercise: end */
    }

    // Õ = alpha Õ + P~ V_j: lane owns columns lane + 32u of the warp's 4 rows; P~ values come by
    // shuffle   (4, dv)
#pragma unroll
    for (int rr = 0; rr < ROWS_PER_WARP; rr++)
#pragma unroll
        for (int u = 0; u < COLS_PER_LANE; u++)
            o[rr][u] *= alpha[rr];
#pragma unroll
    for (int t = 0; t < KEYS_PER_LANE; t++) {
        for (int x = 0; x < 32 && 32 * t + x < keys; x++) {
            const int key = 32 * t + x;
            float v[COLS_PER_LANE];
#pragma unroll
            for (int u = 0; u < COLS_PER_LANE; u++)
                v[u] = lane + 32 * u < dv ? Vs[key * dv + lane + 32 * u] : 0.0f;
#pragma unroll
            for (int rr = 0; rr < ROWS_PER_WARP; rr++) {
                const float p = __shfl_sync(0xffffffffu, s[rr][t], x);
#pragma unroll
                for (int u = 0; u < COLS_PER_LANE; u++)
                    o[rr][u] += p * v[u];
            }
        }
    }
}

/* Query block i = blockIdx.x of head blockIdx.y: Q_i once, then every K/V chunk j in order. */
static __global__ void __launch_bounds__(THREADS)
fa2_kernel(BlockArgs a)
{
    extern __shared__ float smem[];
    const int d = a.d, dv = a.dv;
    float *Qs = smem;                       // Q_i (Br, d)
    float *Ks = Qs + BR * d;                // K_j (Bc, d+1)
    float *Vs = Ks + BC * (d + 1);          // V_j (Bc, dv)

    const int bh = blockIdx.y;              // b * Hq + h
    const int kv_head = (bh / a.Hq) * a.Hkv + (bh % a.Hq) / (a.Hq / a.Hkv);
    const int row0 = blockIdx.x * BR;       // first query row of Q_i
    const int rows = min(BR, a.Tq - row0);  // valid rows of this block (odd Tq)
    const size_t q_row0 = (size_t)bh * a.Tq + row0;      // row index into (B*Hq*Tq)

    // load Q_i into shared memory, once for the whole walk
    load_tile(Qs, d, a.q + q_row0 * d, rows, BR, d);
    if (threadIdx.x == 0) {
        hbm_dev_add(a.hbm_dev, HBM_READ, (unsigned long long)rows * d * sizeof(float));             // Q_i
        hbm_dev_add(a.hbm_dev, HBM_WRITTEN, (unsigned long long)rows * (dv + 1) * sizeof(float)); // O_i, lse_i
    }

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r0 = warp * ROWS_PER_WARP; // this warp's rows r0 .. r0+3 of Q_i
    const bool has_rows = r0 < rows;     // a warp past the last row still joins every barrier

    // m, l and the unnormalised Õ of the warp's 4 rows stay in registers for the whole walk
    float m[ROWS_PER_WARP], l[ROWS_PER_WARP], o[ROWS_PER_WARP][COLS_PER_LANE] = {};
#pragma unroll
    for (int rr = 0; rr < ROWS_PER_WARP; rr++)
        m[rr] = -INFINITY, l[rr] = 0.0f;

    for (int key0 = 0; key0 < a.Tk; key0 += BC) { // the K/V chunks, in order
        const int keys = min(BC, a.Tk - key0);  // valid keys of this chunk (odd Tk)
        const size_t k_row0 = (size_t)kv_head * a.Tk + key0; // row index into (B*Hkv*Tk)
        __syncthreads(); // every warp is done with the previous K_j, V_j
        load_tile(Ks, d + 1, a.k + k_row0 * d, keys, keys, d);
        load_tile(Vs, dv, a.v + k_row0 * dv, keys, keys, dv);
        if (threadIdx.x == 0)
            hbm_dev_add(a.hbm_dev, HBM_READ, (unsigned long long)keys * (d + dv) * sizeof(float)); // K_j, V_j
        __syncthreads();
        if (has_rows)
            chunk_step(Qs, Ks, Vs, d, dv, keys, a.scale, r0, lane, m, l, o);
    }

    // O_i = Õ / l and lse_i = m + log(l), written once
    if (!has_rows)
        return;
#pragma unroll
    for (int rr = 0; rr < ROWS_PER_WARP; rr++) {
        if (r0 + rr >= rows)
            break;
        /* exercise: begin — O_i = Õ / l, this lane's columns of row rr, and lse_i = m + log l (check 05 --device cuda: o.npy and lse.npy) */
        float *o_row = a.o + (q_row0 + r0 + rr) * dv;
        const float inv_l = 1.0f / l[rr];
#pragma unroll
        for (int u = 0; u < COLS_PER_LANE; u++) {
            const int c = lane + 32 * u;
            if (c < dv)
                o_row[c] = o[rr][u] * inv_l;
        }
        if (lane == 0)
            a.lse[q_row0 + r0 + rr] = m[rr] + logf(l[rr]);
        /* exercise: end */
    }
}

static int check_sizes(const AttnProblem *p, const RunCtx *ctx, FlError *err)
{
    if (p->d > MAX_D || p->dv > MAX_D)
        return fl_fail(err, FL_BAD_INPUT, "stage 05 (fa2, cuda): head dims up to %d are "
                       "supported, got d = %d, dv = %d", MAX_D, p->d, p->dv);
    if ((long long)p->B * p->Hq > 65535)
        return fl_fail(err, FL_BAD_INPUT, "stage 05 (fa2, cuda): B*Hq = %lld exceeds the "
                       "grid's 65535 heads", (long long)p->B * p->Hq);
    if ((ctx->block_r && ctx->block_r != BR) || (ctx->block_c && ctx->block_c != BC))
        return fl_fail(err, FL_BAD_INPUT, "stage 05 (fa2, cuda): the kernel's tiles are fixed "
                       "at Br = %d, Bc = %d (asked for %d x %d)", BR, BC, ctx->block_r, ctx->block_c);
    return FL_OK;
}

static int fa2_forward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    int rc = check_sizes(p, ctx, err);
    if (rc != FL_OK)
        return rc;
    if (p->Tq <= 0 || p->Tk <= 0 || p->B <= 0 || p->Hq <= 0)
        return FL_OK; // nothing to compute
    const size_t smem = shared_bytes(p->d, p->dv);
    rc = fl_cuda_status(cudaFuncSetAttribute(fa2_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                        "asking for the shared memory of fa2_kernel", err);
    if (rc != FL_OK)
        return rc;
    BlockArgs a = {p->q, p->k, p->v, t->o, t->lse, p->Hq, p->Hkv, p->Tq, p->Tk, p->d, p->dv, p->scale,
                   ctx->hbm_dev};
    const dim3 grid((unsigned)ceil_div(p->Tq, BR), (unsigned)(p->B * p->Hq));
    fa2_kernel<<<grid, THREADS, smem>>>(a); // one launch: every query block walks all K/V chunks
    return fl_cuda_launch_status("fa2_kernel", err);
}

static const StageImpl fa2_cuda = {
    "05",
    "fa2",
    "",
    DEVICE_CUDA,
    "FlashAttention-2 kernel (the lesson): Q tile per block, m, l and the unnormalised O in "
    "registers, O and lse written once",
    0,
    fa2_forward,
    NULL,
    NULL,
};

// The performance step: the same algorithm with cp.async pipelining, register micro-tiles, float4
// loads and one configuration per head dim, registered as variant "tuned" (README.md walks it).
#include "fa2_tuned.cuh"

extern "C" const StageImpl *const stage05_fa2_cuda[] = {&fa2_cuda, &fa2_tuned_cuda, NULL};
