/* mma.cuh — the tensor-core plumbing of stage 12 (bf16 inputs, float32 accumulation, sm_80+):
 * the warp-level matrix instruction mma.sync m16n8k16, the ldmatrix loads that feed it, a swizzled
 * shared-memory tile layout, and a cp.async tile loader. The stage's kernels read as the
 * FlashAttention-2 algorithm because the fragment bookkeeping lives here, once; the stage's README
 * walks every piece.
 *
 * One mma.sync m16n8k16 computes C (16 x 8, float32) += A (16 x 16, bf16) B (16 x 8, bf16) for a
 * whole warp. Each lane holds a fixed piece of every operand ("fragments"); with g = lane / 4 and
 * t = lane % 4:
 *   A: 4 registers, each two bf16 along k:  a0 (row g, k 2t..2t+1)    a1 (row g+8, k 2t..2t+1)
 *                                           a2 (row g, k 2t+8..2t+9)  a3 (row g+8, k 2t+8..2t+9)
 *   B: 2 registers:                         b0 (k 2t..2t+1, col g)    b1 (k 2t+8..2t+9, col g)
 *   C: 4 floats:                            c0, c1 (row g, cols 2t, 2t+1)
 *                                           c2, c3 (row g+8, cols 2t, 2t+1)
 * Two C tiles side by side (16 x 16) hold exactly the elements of one A fragment: a score tile
 * computed by one mma can feed the next mma as its A operand without leaving registers
 * (a_from_c below). That is how P stays in registers between S = Q K^T and O += P V.
 *
 * ldmatrix.x4 loads four 8 x 8 bf16 matrices from shared memory, one 16-byte row address per
 * lane (lanes 8i..8i+7 name the rows of matrix i), and leaves each lane its fragment pieces;
 * .trans transposes each matrix on the way. The four helpers below name which operand they build
 * and from which stored layout.
 *
 * Shared-memory tiles are row-major bf16 with D columns (D = 64 or 128), split into 16-byte chunks
 * of 8 elements. An ldmatrix reads one chunk from each of 8 consecutive rows; with rows of 128 or
 * 256 bytes those 8 chunks would all fall in the same 4 banks (an 8-way conflict). The swizzle
 * stores chunk c of row r at chunk position c ^ (r % 8), so the 8 rows' chunks land on 8 different
 * bank groups, for every chunk column and for the cp.async writes too. */
#ifndef FLASHLAB_MMA_CUH
#define FLASHLAB_MMA_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "cuda_tiles.cuh"

typedef __nv_bfloat16 bf16;

// ---- the swizzled tile layout --------------------------------------------------------------------

// Element offset of (row, col) in a swizzled (rows, D) tile; col is a multiple of 8 (a chunk start).
template <int D> __device__ __forceinline__ int swizzle(int row, int col)
{
    return row * D + (((col >> 3) ^ (row & 7)) << 3);
}

// A (ROWS, D) tile of a row-major HBM matrix with D columns, of which `rows` rows exist, into a
// swizzled shared-memory tile; missing rows become 0. 16-byte cp.async copies, NT threads.
template <int ROWS, int D, int NT>
__device__ __forceinline__ void load_tile_swizzled(bf16 *sm, const bf16 *g, int rows, int tid)
{
    constexpr int CHUNKS = D / 8;
#pragma unroll
    for (int idx = tid; idx < ROWS * CHUNKS; idx += NT) {
        const int r = idx / CHUNKS, c = (idx % CHUNKS) * 8;
        const bool ok = r < rows;
        cp_async16(sm + swizzle<D>(r, c), ok ? g + (size_t)r * D + c : g, ok ? 16 : 0);
    }
}

// ---- ldmatrix ------------------------------------------------------------------------------------

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const bf16 *p)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const bf16 *p)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

// The A fragment of rows m0..m0+15, k0..k0+15 from a tile stored [m][k] (Q for S = Q K^T).
// Lane l names row m0 + l % 16 at column k0 + 8 (l / 16): matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15).
template <int D>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16 *tile, int m0, int k0, int lane)
{
    ldmatrix_x4(a, tile + swizzle<D>(m0 + (lane & 15), k0 + ((lane >> 4) << 3)));
}

// The A fragment of rows m0..m0+15, k0..k0+15 from a tile stored transposed, [k][m]
// (dS^T for dQ = dS K): each 8 x 8 matrix is transposed by the load.
template <int D>
__device__ __forceinline__ void load_a_trans(uint32_t (&a)[4], const bf16 *tile, int m0, int k0,
                                             int lane)
{
    ldmatrix_x4_trans(a, tile + swizzle<D>(k0 + (lane & 7) + ((lane >> 4) << 3),
                                           m0 + (((lane >> 3) & 1) << 3)));
}

// B fragments of two n-tiles (cols n0..n0+7 -> b[0], b[1]; n0+8..n0+15 -> b[2], b[3]) over
// k0..k0+15, from a tile stored [n][k] (K for S = Q K^T: each key's d values are contiguous).
template <int D>
__device__ __forceinline__ void load_b_pair(uint32_t (&b)[4], const bf16 *tile, int n0, int k0,
                                            int lane)
{
    ldmatrix_x4(b, tile + swizzle<D>(n0 + (lane & 7) + ((lane >> 4) << 3),
                                     k0 + (((lane >> 3) & 1) << 3)));
}

// The same two n-tiles from a tile stored [k][n] (V for O += P V: k runs over keys, the rows).
template <int D>
__device__ __forceinline__ void load_b_pair_trans(uint32_t (&b)[4], const bf16 *tile, int n0, int k0,
                                                  int lane)
{
    ldmatrix_x4_trans(b, tile + swizzle<D>(k0 + (lane & 15), n0 + ((lane >> 4) << 3)));
}

// ---- the matrix instruction and fragment conversions ----------------------------------------------

// c += a b  (16 x 8 += 16 x 16 times 16 x 8), bf16 inputs, float32 accumulation.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded to bf16 (nearest even) in one register: lo in the low half.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
}

// The A fragment (16 x 16, bf16) made of two float32 C tiles side by side: c_left holds columns
// 0..7, c_right columns 8..15 (see the layouts at the top).
__device__ __forceinline__ void a_from_c(uint32_t (&a)[4], const float (&c_left)[4],
                                         const float (&c_right)[4])
{
    a[0] = pack_bf16(c_left[0], c_left[1]);
    a[1] = pack_bf16(c_left[2], c_left[3]);
    a[2] = pack_bf16(c_right[0], c_right[1]);
    a[3] = pack_bf16(c_right[2], c_right[3]);
}

// 2^x by the hardware's approximate exponential (one MUFU.EX2; results below 2^-126 flush to 0,
// which no sum of probabilities can see). exp2f also keeps such subnormal results, at the cost of
// a few more instructions per score.
__device__ __forceinline__ float fast_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// A C fragment's 8-column block as quads, for 16-byte stores or vector atomics: lane t4 = lane % 4
// holds columns 2 t4, 2 t4 + 1 of row g (x0, y0) and of row g + 8 (x1, y1); lanes t4 and t4 ^ 1 swap
// a pair (one shuffle each way), after which the even lane holds columns 4 (t4 / 2) .. + 3 of row g
// and the odd lane the same four of row g + 8 (fragment_quad_row says which). Every lane of the
// warp must call it.
__device__ __forceinline__ float4 fragment_quad(int t4, float x0, float y0, float x1, float y1)
{
    const bool odd = t4 & 1;
    const float rx = __shfl_xor_sync(0xffffffffu, odd ? x0 : x1, 1); // the pair the other lane keeps
    const float ry = __shfl_xor_sync(0xffffffffu, odd ? y0 : y1, 1);
    return odd ? make_float4(rx, ry, x1, y1) : make_float4(x0, y0, rx, ry);
}
// The quad's row (0: g, 8: g + 8) and first column within the 8-column block.
__device__ __forceinline__ int fragment_quad_row(int t4) { return 8 * (t4 & 1); }
__device__ __forceinline__ int fragment_quad_col(int t4) { return 4 * (t4 >> 1); }

// dst += v for two neighbouring floats (a C fragment's pair) with float32 atomics.
__device__ __forceinline__ void atomic_add_pair(float *dst, float x, float y)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float2 *>(dst), make_float2(x, y)); // one vector atomic (sm_90)
#else
    atomicAdd(dst, x);
    atomicAdd(dst + 1, y);
#endif
}

#endif
