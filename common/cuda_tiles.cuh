/* cuda_tiles.cuh — the shared-memory tile plumbing of the register-blocked float32 kernels
 * (stages 05 and up): cp.async copies, a zero-filling tile loader, row reductions across the
 * threads that share a row, and the two block-level matrix products every FlashAttention step is
 * made of. None of this is a lesson of its own; the stage kernels read as the paper's algorithm
 * because the machinery lives here, once.
 *
 * The thread layout all of it assumes (stage 05's README walks it):
 *   a block computes an (M x N) tile of a product with RG x CG threads; thread tid = rg * CG + cg
 *   owns a TM x TN micro-tile with rows  rg + RG*i  (i < TM)  and, depending on the product,
 *     columns  cg + CG*j          (j < TN)   for A B^T   (scores: S = Q K^T, dP = dO V^T)
 *     columns  4*(CG*q + cg) + u  (q < OQ)   for A B     (outputs: O += P V, dV += P^T dO, ...)
 *   The CG threads of one row are neighbours in one warp (CG divides 32), so a row reduction is a
 *   few __shfl_xor_sync steps, and the RG rows of a warp read the same A row (a broadcast). */
#ifndef FLASHLAB_CUDA_TILES_CUH
#define FLASHLAB_CUDA_TILES_CUH

#include <cuda_runtime.h>
#include <math.h>

// ---- cp.async: global -> shared without passing through registers (sm_80+) --------------------
// src_bytes < size zero-fills the rest, which is how rows past T and columns past d become 0.
// (16-byte copies take any element type: float32 tiles here, bf16 tiles in mma.cuh.)
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, int src_bytes)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
                 "r"(src_bytes));
}
__device__ __forceinline__ void cp_async4(float *smem, const float *gmem, int src_bytes)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem),
                 "r"(src_bytes));
}
// The same 16-byte copy with an L2 eviction policy (l2_evict_first): for data read exactly once,
// such as a decode step's KV cache. Its lines are then the first the L2 gives up, so a long stream
// of them does not push out what else is there (small tables read again next time, dirty lines that
// would otherwise be written back to DRAM in the middle of the stream).
__device__ __forceinline__ void cp_async16_policy(void *smem, const void *gmem, int src_bytes,
                                                  unsigned long long policy)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(s), "l"(gmem),
                 "r"(src_bytes), "l"(policy));
}
// An L2 policy that makes the lines it touches the first to be evicted.
__device__ __forceinline__ unsigned long long l2_evict_first()
{
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Tile (ROWS, COLS) gathered row by row into shared memory with row stride STRIDE: row r comes
// from row_at(r), a pointer to its `cols` floats in HBM, or nullptr for a row that does not exist.
// Missing rows and columns past `cols` become 0 (cp.async with 0 source bytes; `any` is a valid
// global address it is given instead). `vec`: 16-byte copies (cols % 4 == 0 and every row 16-byte
// aligned), else 4-byte copies. NT threads share the work; a row's chunks go to neighbouring threads.
template <int ROWS, int COLS, int STRIDE, int NT, class RowAt>
__device__ __forceinline__ void load_rows(float *sm, RowAt row_at, const float *any, int cols, bool vec,
                                          int tid)
{
    // Thread tid copies chunks tid, tid + NT, ...: a trip count known at compile time lets the
    // loop unroll fully and the row/column arithmetic fold into constants per step.
    const unsigned t = (unsigned)tid;
    if (vec) {
        constexpr unsigned CH = COLS / 4, N = ROWS * CH;
#pragma unroll
        for (unsigned step = 0; step < (N + NT - 1) / NT; step++) {
            const unsigned idx = step * NT + t;
            if (N % NT != 0 && idx >= N)
                break;
            const int r = (int)(idx / CH), c = (int)(idx % CH) * 4;
            const float *row = row_at(r);
            const bool ok = row != nullptr && c < cols;
            cp_async16(sm + r * STRIDE + c, ok ? row + c : any, ok ? 16 : 0);
        }
    } else {
        for (unsigned idx = t; idx < (unsigned)(ROWS * COLS); idx += NT) {
            const int r = (int)(idx / COLS), c = (int)(idx % COLS);
            const float *row = row_at(r);
            const bool ok = row != nullptr && c < cols;
            cp_async4(sm + r * STRIDE + c, ok ? row + c : any, ok ? 4 : 0);
        }
    }
}

// Tile (ROWS, COLS) of a row-major HBM matrix with `cols` columns, of which `rows` rows exist,
// into shared memory with row stride STRIDE; missing rows/columns become 0. `vec`: 16-byte
// copies (cols % 4 == 0 and 16-byte aligned base), else 4-byte copies. NT threads share the work.
template <int ROWS, int COLS, int STRIDE, int NT>
__device__ __forceinline__ void load_tile(float *sm, const float *g, int rows, int cols, bool vec,
                                          int tid)
{
    const auto row_at = [=](int r) { return r < rows ? g + (size_t)r * cols : nullptr; };
    load_rows<ROWS, COLS, STRIDE, NT>(sm, row_at, g, cols, vec, tid);
}

// A vector of n floats (n <= N) into shared memory, zero-filled past n (lse, D of a row block).
template <int N, int NT>
__device__ __forceinline__ void load_vector(float *sm, const float *g, int n, int tid)
{
    for (int i = tid; i < N; i += NT)
        cp_async4(sm + i, i < n ? g + i : g, i < n ? 4 : 0);
}

// ---- reductions over the CG threads that share a row (neighbours in one warp) ------------------
template <int CG> __device__ __forceinline__ float row_max(float x)
{
#pragma unroll
    for (int off = CG / 2; off > 0; off >>= 1)
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
    return x;
}
template <int CG> __device__ __forceinline__ float row_sum(float x)
{
#pragma unroll
    for (int off = CG / 2; off > 0; off >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

// ---- block-level products on shared-memory tiles, plain FFMA, float4 reads -------------------

// acc[i][j] += sum_{k < K} A[r_i][k] * B[c_j][k]          (A B^T; r_i = rg + RG*i, c_j = cg + CG*j)
// A and B are row-major with strides LDA, LDB (multiples of 4; K % 4 == 0).
template <int TM, int TN, int RG, int CG, int K, int LDA, int LDB>
__device__ __forceinline__ void mma_abt(float (&acc)[TM][TN], const float *A, const float *B,
                                        int rg, int cg)
{
#pragma unroll 2
    for (int kk = 0; kk < K; kk += 4) {
        float4 a[TM], b[TN];
#pragma unroll
        for (int i = 0; i < TM; i++)
            a[i] = *reinterpret_cast<const float4 *>(&A[(rg + RG * i) * LDA + kk]);
#pragma unroll
        for (int j = 0; j < TN; j++)
            b[j] = *reinterpret_cast<const float4 *>(&B[(cg + CG * j) * LDB + kk]);
#pragma unroll
        for (int i = 0; i < TM; i++)
#pragma unroll
            for (int j = 0; j < TN; j++) {
                acc[i][j] = fmaf(a[i].x, b[j].x, acc[i][j]);
                acc[i][j] = fmaf(a[i].y, b[j].y, acc[i][j]);
                acc[i][j] = fmaf(a[i].z, b[j].z, acc[i][j]);
                acc[i][j] = fmaf(a[i].w, b[j].w, acc[i][j]);
            }
    }
}

__device__ __forceinline__ float4 fma4(float a, float4 b, float4 c)
{
    return make_float4(fmaf(a, b.x, c.x), fmaf(a, b.y, c.y), fmaf(a, b.z, c.z), fmaf(a, b.w, c.w));
}

__device__ __forceinline__ float lane4(float4 v, int u)
{
    return u == 0 ? v.x : u == 1 ? v.y : u == 2 ? v.z : v.w;
}

// acc[i][q] += sum_{k < K} A[r_i][k] * B[k][4(CG q + cg) .. +3]      (A B; r_i = rg + RG*i)
// A (rows, K) and B (K, 4 CG OQ) row-major with strides LDA, LDB (multiples of 4; K % 4 == 0).
template <int TM, int OQ, int RG, int CG, int K, int LDA, int LDB>
__device__ __forceinline__ void mma_ab(float4 (&acc)[TM][OQ], const float *A, const float *B,
                                       int rg, int cg)
{
#pragma unroll 4 // 4 beat 2 by 4% in the stage 06 backward (H100); the forward is unchanged
    for (int kk = 0; kk < K; kk += 4) {
        float4 a[TM];
#pragma unroll
        for (int i = 0; i < TM; i++)
            a[i] = *reinterpret_cast<const float4 *>(&A[(rg + RG * i) * LDA + kk]);
#pragma unroll
        for (int u = 0; u < 4; u++) {
            float4 b[OQ];
#pragma unroll
            for (int q = 0; q < OQ; q++)
                b[q] = *reinterpret_cast<const float4 *>(&B[(kk + u) * LDB + 4 * (CG * q + cg)]);
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int q = 0; q < OQ; q++)
                    acc[i][q] = fma4(lane4(a[i], u), b[q], acc[i][q]);
        }
    }
}

// Zeroes an accumulator.
template <int TM, int TN> __device__ __forceinline__ void zero(float (&acc)[TM][TN])
{
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++)
            acc[i][j] = 0.0f;
}
template <int TM, int OQ> __device__ __forceinline__ void zero(float4 (&acc)[TM][OQ])
{
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int q = 0; q < OQ; q++)
            acc[i][q] = make_float4(0.f, 0.f, 0.f, 0.f);
}

// Row r of an output tile (dv columns in HBM, float4 columns 4(CG q + cg) in registers), times
// `scale`; columns past n are not written. `vec`: 16-byte stores allowed (n % 4 == 0, aligned).
template <int OQ, int CG>
__device__ __forceinline__ void store_row(float *row, const float4 (&x)[OQ], float scale, int n,
                                          bool vec, int cg)
{
#pragma unroll
    for (int q = 0; q < OQ; q++) {
        const int c = 4 * (CG * q + cg);
        const float4 r = make_float4(x[q].x * scale, x[q].y * scale, x[q].z * scale, x[q].w * scale);
        if (vec && c + 4 <= n) {
            *reinterpret_cast<float4 *>(row + c) = r;
        } else {
            if (c + 0 < n) row[c + 0] = r.x;
            if (c + 1 < n) row[c + 1] = r.y;
            if (c + 2 < n) row[c + 2] = r.z;
            if (c + 3 < n) row[c + 3] = r.w;
        }
    }
}

// Row r of an output tile blended into the row already in HBM: row = keep * row + scale * x (float4
// columns 4(CG q + cg) of x in registers); columns past n are not touched. Each thread reads and
// writes only its own columns. `vec`: 16-byte accesses allowed (n % 4 == 0, aligned).
template <int OQ, int CG>
__device__ __forceinline__ void blend_row(float *row, const float4 (&x)[OQ], float scale, float keep, int n,
                                          bool vec, int cg)
{
#pragma unroll
    for (int q = 0; q < OQ; q++) {
        const int c = 4 * (CG * q + cg);
        if (vec && c + 4 <= n) {
            const float4 old = *reinterpret_cast<const float4 *>(row + c);
            *reinterpret_cast<float4 *>(row + c) =
                make_float4(fmaf(keep, old.x, scale * x[q].x), fmaf(keep, old.y, scale * x[q].y),
                            fmaf(keep, old.z, scale * x[q].z), fmaf(keep, old.w, scale * x[q].w));
        } else {
#pragma unroll
            for (int u = 0; u < 4; u++)
                if (c + u < n)
                    row[c + u] = fmaf(keep, row[c + u], scale * lane4(x[q], u));
        }
    }
}

// Adds row r of a tile (float4 columns 4(CG q + cg) in registers, times `scale`) into HBM with
// float32 atomics; columns past n are skipped. `vec`: the row is 16-byte aligned and n % 4 == 0,
// so sm_90 can add four floats in one vector atomic; older GPUs add them one by one.
template <int OQ, int CG>
__device__ __forceinline__ void atomic_add_row(float *row, const float4 (&x)[OQ], float scale,
                                               int n, bool vec, int cg)
{
#pragma unroll
    for (int q = 0; q < OQ; q++) {
        const int c = 4 * (CG * q + cg);
        const float4 r = make_float4(x[q].x * scale, x[q].y * scale, x[q].z * scale, x[q].w * scale);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        if (vec && c + 4 <= n) {
            atomicAdd(reinterpret_cast<float4 *>(row + c), r);
            continue;
        }
#endif
        (void)vec;
        if (c + 0 < n) atomicAdd(row + c + 0, r.x);
        if (c + 1 < n) atomicAdd(row + c + 1, r.y);
        if (c + 2 < n) atomicAdd(row + c + 2, r.z);
        if (c + 3 < n) atomicAdd(row + c + 3, r.w);
    }
}

// Reductions over the whole thread block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. `scratch` is 32 floats of shared memory; the call synchronises the block.
// `pad` is the reduction's identity (0 for a sum, -inf for a max), used for the missing warps.
template <class Op>
__device__ __forceinline__ float block_reduce(float x, float *scratch, float pad, Op op)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        x = op(x, __shfl_xor_sync(0xffffffffu, x, off));
    if (lane == 0)
        scratch[warp] = x;
    __syncthreads();
    x = lane < warps ? scratch[lane] : pad;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        x = op(x, __shfl_xor_sync(0xffffffffu, x, off));
    __syncthreads(); // scratch may be reused
    return x;
}
__device__ __forceinline__ float block_sum(float x, float *scratch)
{
    return block_reduce(x, scratch, 0.0f, [](float u, float w) { return u + w; });
}
__device__ __forceinline__ float block_max(float x, float *scratch)
{
    return block_reduce(x, scratch, -INFINITY, [](float u, float w) { return fmaxf(u, w); });
}

#endif
