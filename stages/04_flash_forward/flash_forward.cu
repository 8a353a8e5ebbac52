/* flash_forward.cu — stage 04: FlashForward (the FA1 loop order) as a CUDA kernel.
 *
 * The algorithm of stage 03, with the GPU's shared memory as the SRAM:
 *   O = 0, m = -inf, l = 0 in HBM
 *   for each K/V chunk j (Bc keys):                 one kernel launch per chunk, in order
 *     for each query block i (Br rows), in parallel: one thread block per (i, head)
 *       load K_j, V_j, Q_i to shared memory; O_i, m_i, l_i from HBM to registers
 *       S     = scale * Q_i K_j^T                   (Br, Bc)
 *       m~    = rowmax(S);  P~ = exp(S - m~);  l~ = rowsum(P~)
 *       m_new = max(m_i, m~);  l_new = e^(m_i - m_new) l_i + e^(m~ - m_new) l~
 *       O_i   = (l_i e^(m_i - m_new) O_i + e^(m~ - m_new) P~ V_j) / l_new     (kept normalised)
 *       write O_i, m_i = m_new, l_i = l_new back to HBM
 *   lse = m + log(l)                                 (by the last chunk's launch)
 * O, m and l make a round trip through HBM for every K/V chunk: that is what stage 05 removes.
 *
 * Thread mapping (README.md has the picture): a block of 8 warps owns Br = 32 query rows, 4 per
 * warp. For S, lane x of a warp scores keys x and x + 32 of the chunk (Bc = 64), so a row's max and
 * sum are warp reductions. For P~ V_j, lane x owns output columns x, x+32, x+64, x+96 (dv <= 128)
 * and takes each P~ value from the lane that computed it with a shuffle. */
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

struct ChunkArgs {
    const float *q, *k, *v;
    float *o, *m, *l, *lse; // m, l (B, Hq, Tq) in the workspace
    int Hq, Hkv, Tq, Tk, d, dv;
    float scale;
    int j;          // this launch's K/V chunk
    int last_chunk; // 1: also write lse
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

/* O, m, l as FlashForward assumes them before the first chunk: O = 0, m = -inf, l = 0.
 * Thread x of block b clears o element b*256+x and, for the first rows, m and l of that row. */
static __global__ void init_oml_kernel(float *o, float *m, float *l, long long rows, int dv,
                                       unsigned long long *hbm_dev)
{
    const long long first = (long long)blockIdx.x * blockDim.x, idx = first + threadIdx.x;
    if (idx < rows * dv)
        o[idx] = 0.0f;
    if (idx < rows) {
        m[idx] = -INFINITY;
        l[idx] = 0.0f;
    }
    if (threadIdx.x == 0) {
        const long long n_o = min((long long)blockDim.x, rows * dv - first);
        const long long n_ml = max(0ll, min((long long)blockDim.x, rows - first));
        hbm_dev_add(hbm_dev, HBM_WRITTEN, (unsigned long long)(n_o + 2 * n_ml) * sizeof(float));
    }
}

/* One K/V chunk j for one query block i = blockIdx.x of one head = blockIdx.y. */
static __global__ void __launch_bounds__(THREADS)
flash_chunk_kernel(ChunkArgs a)
{
    extern __shared__ float smem[];
    const int d = a.d, dv = a.dv;
    float *Qs = smem;                       // Q_i (Br, d)
    float *Ks = Qs + BR * d;                // K_j (Bc, d+1)
    float *Vs = Ks + BC * (d + 1);          // V_j (Bc, dv)

    const int bh = blockIdx.y;              // b * Hq + h
    const int kv_head = (bh / a.Hq) * a.Hkv + (bh % a.Hq) / (a.Hq / a.Hkv);
    const int row0 = blockIdx.x * BR;       // first query row of Q_i
    const int key0 = a.j * BC;              // first key of K_j
    const int rows = min(BR, a.Tq - row0);  // valid rows of this block (odd Tq)
    const int keys = min(BC, a.Tk - key0);  // valid keys of this chunk (odd Tk)
    const size_t q_row0 = (size_t)bh * a.Tq + row0;      // row index into (B*Hq*Tq)
    const size_t k_row0 = (size_t)kv_head * a.Tk + key0; // row index into (B*Hkv*Tk)

    // load K_j, V_j, Q_i into shared memory
    load_tile(Ks, d + 1, a.k + k_row0 * d, keys, keys, d);
    load_tile(Vs, dv, a.v + k_row0 * dv, keys, keys, dv);
    load_tile(Qs, d, a.q + q_row0 * d, rows, BR, d);
    if (threadIdx.x == 0) {
        hbm_dev_add(a.hbm_dev, HBM_READ, (unsigned long long)keys * (d + dv) * sizeof(float)); // K_j, V_j
        hbm_dev_add(a.hbm_dev, HBM_READ, (unsigned long long)rows * d * sizeof(float));        // Q_i
        hbm_dev_add(a.hbm_dev, HBM_READ, (unsigned long long)rows * (dv + 2) * sizeof(float)); // O_i, m_i, l_i
        hbm_dev_add(a.hbm_dev, HBM_WRITTEN, (unsigned long long)rows * (dv + 2) * sizeof(float)); // O_i, m_i, l_i
        if (a.last_chunk)
            hbm_dev_add(a.hbm_dev, HBM_WRITTEN, (unsigned long long)rows * sizeof(float));     // lse_i
    }
    __syncthreads();

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r0 = warp * ROWS_PER_WARP; // this warp's rows r0 .. r0+3 of Q_i
    if (r0 >= rows)
        return; // no barrier follows

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
            s[rr][t] = key < keys ? acc[rr] * a.scale : -INFINITY;
    }

    // the online-softmax update of each row; O_i, m_i, l_i come from HBM and go back to it
    float c_old[ROWS_PER_WARP], c_new[ROWS_PER_WARP];
#pragma unroll
    for (int rr = 0; rr < ROWS_PER_WARP; rr++) {
        // m~ = rowmax(S), P~ = exp(S - m~), l~ = rowsum(P~): the chunk has >= 1 valid key
        float m_tile = -INFINITY;
#pragma unroll
        for (int t = 0; t < KEYS_PER_LANE; t++)
            m_tile = fmaxf(m_tile, s[rr][t]);
        m_tile = warp_max(m_tile);
        float l_tile = 0.0f;
#pragma unroll
        for (int t = 0; t < KEYS_PER_LANE; t++) {
            s[rr][t] = expf(s[rr][t] - m_tile); // exp(-inf) = 0 for keys past Tk
            l_tile += s[rr][t];
        }
        l_tile = warp_sum(l_tile);

        const int r = r0 + rr;
        const bool valid = r < rows;
        const size_t grow = q_row0 + r;                      // row within (B*Hq*Tq)
        const float m_old = valid ? a.m[grow] : -INFINITY;
        const float l_old = valid ? a.l[grow] : 0.0f;
        /* exercise: begin — merge the tile into m_i, l_i: c_old, c_new; write m, l, lse (check 04 --device cuda: lse.npy, then o.npy) | stub: c_old[rr] = c_new[rr] = 0.0f; */
        const float m_new = fmaxf(m_old, m_tile);
        const float alpha = expf(m_old - m_new);             // 0 on the first chunk (m_old = -inf)
        const float beta = expf(m_tile - m_new);
        const float l_new = alpha * l_old + beta * l_tile;   // >= 1: the max key gives exp(0)
        c_old[rr] = alpha * l_old / l_new;
        c_new[rr] = beta / l_new;
        __syncwarp(); // every lane has read m_i, l_i before lane 0 overwrites them
        if (valid && lane == 0) {
            a.m[grow] = m_new;
            a.l[grow] = l_new;
            if (a.last_chunk)
                a.lse[grow] = m_new + logf(l_new);
        }
        /* exercise: end */
    }

    // P~ V_j: lane owns columns lane + 32t of the warp's 4 rows; P~ values come by shuffle   (4, dv)
    float pv[ROWS_PER_WARP][COLS_PER_LANE] = {};
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
                    pv[rr][u] += p * v[u];
            }
        }
    }

    // O_i = (l_old e^(m_old - m_new) O_i + e^(m~ - m_new) P~ V_j) / l_new, in HBM
#pragma unroll
    for (int rr = 0; rr < ROWS_PER_WARP; rr++) {
        if (r0 + rr >= rows)
            break;
        /* exercise: begin — O_i = c_old O_i + c_new P~ V_j, this lane's columns of row rr (check 04 --device cuda: o.npy) */
        float *o_row = a.o + (q_row0 + r0 + rr) * dv;
#pragma unroll
        for (int u = 0; u < COLS_PER_LANE; u++) {
            const int c = lane + 32 * u;
            if (c < dv)
                o_row[c] = c_old[rr] * o_row[c] + c_new[rr] * pv[rr][u];
        }
        /* exercise: end */
    }
}

static size_t flash_workspace_bytes(const AttnProblem *p, const RunCtx *ctx, Direction dir)
{
    (void)ctx, (void)dir;
    return 2 * (size_t)p->B * p->Hq * p->Tq * sizeof(float); // m, l
}

static int check_sizes(const AttnProblem *p, const RunCtx *ctx, FlError *err)
{
    if (p->d > MAX_D || p->dv > MAX_D)
        return fl_fail(err, FL_BAD_INPUT, "stage 04 (flash_forward, cuda): head dims up to %d are "
                       "supported, got d = %d, dv = %d", MAX_D, p->d, p->dv);
    if ((long long)p->B * p->Hq > 65535)
        return fl_fail(err, FL_BAD_INPUT, "stage 04 (flash_forward, cuda): B*Hq = %lld exceeds the "
                       "grid's 65535 heads", (long long)p->B * p->Hq);
    if ((ctx->block_r && ctx->block_r != BR) || (ctx->block_c && ctx->block_c != BC))
        return fl_fail(err, FL_BAD_INPUT, "stage 04 (flash_forward, cuda): the kernel's tiles are fixed "
                       "at Br = %d, Bc = %d (asked for %d x %d)", BR, BC, ctx->block_r, ctx->block_c);
    return FL_OK;
}

static int flash_forward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    int rc = check_sizes(p, ctx, err);
    if (rc != FL_OK)
        return rc;
    const size_t smem = shared_bytes(p->d, p->dv);
    rc = fl_cuda_status(cudaFuncSetAttribute(flash_chunk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)smem),
                        "asking for the shared memory of flash_chunk_kernel", err);
    if (rc != FL_OK)
        return rc;
    float *m = (float *)ctx->workspace;                // (B, Hq, Tq)
    float *l = m + (size_t)p->B * p->Hq * p->Tq;       // (B, Hq, Tq)

    const long long rows = (long long)p->B * p->Hq * p->Tq;
    const long long o_elems = rows * p->dv; // >= rows: one pass clears all three
    init_oml_kernel<<<(unsigned)((o_elems + 255) / 256), 256>>>(t->o, m, l, rows, p->dv, ctx->hbm_dev);
    rc = fl_cuda_launch_status("init_oml_kernel", err);

    ChunkArgs a = {p->q, p->k, p->v, t->o, m, l, t->lse, p->Hq, p->Hkv, p->Tq, p->Tk, p->d, p->dv,
                   p->scale, 0, 0, ctx->hbm_dev};
    const dim3 grid((unsigned)ceil_div(p->Tq, BR), (unsigned)(p->B * p->Hq));
    const int chunks = ceil_div(p->Tk, BC);
    for (int j = 0; rc == FL_OK && j < chunks; j++) { // K/V chunks outer, in order
        a.j = j;
        a.last_chunk = j == chunks - 1;
        flash_chunk_kernel<<<grid, THREADS, smem>>>(a); // query blocks inner, in parallel
        rc = fl_cuda_launch_status("flash_chunk_kernel", err);
    }
    return rc;
}

static const StageImpl flash_forward_cuda = {
    "04",
    "flash_forward",
    "",
    DEVICE_CUDA,
    "FlashForward as a CUDA kernel: shared-memory tiles, O re-read and re-written per K/V chunk",
    0,
    flash_forward,
    NULL,
    flash_workspace_bytes,
};

extern "C" const StageImpl *const stage04_flash_forward_cuda[] = {&flash_forward_cuda, NULL};
