/* hopper.cuh — the Hopper (sm_90a) plumbing that stage 14 is built on, once, in plain CUDA C with
 * inline PTX: no CUTLASS, no CuTe. Four pieces, each small:
 *
 *   mbarrier   a 64-bit barrier in shared memory that counts arriving threads *and* bytes still in
 *              flight ("transaction count"). A TMA copy names a barrier and decrements its count
 *              as bytes land; a consumer waits on the barrier's phase bit (parity) flipping.
 *   TMA        the Tensor Memory Accelerator: one thread issues a bulk copy of a whole tile
 *              (a "box") of a 2-D global tensor into shared memory, described once on the host by
 *              a CUtensorMap (built with cuTensorMapEncodeTiled, reached through the runtime's
 *              driver entry point, so no -lcuda).
 *   wgmma      warpgroup MMA: the 4 warps (128 threads) of a warpgroup together compute
 *              D (64 x N, float32) += A (64 x 16, bf16) B (16 x N, bf16) with A and B read straight
 *              from shared memory through 64-bit "matrix descriptors", asynchronously: issue, then
 *              commit a group and wait for it.
 *   setmaxnreg a warpgroup hands registers back (producer) or takes more (consumers).
 *
 * Shared-memory layout used here (no swizzle, "K-major": K contiguous). wgmma reads its operands
 * as 8 x 8 "core matrices" of bf16 (8 rows of 16 bytes, stored as one contiguous 128-byte block).
 * A tile of R rows and K columns is stored as K/8 slabs, slab s holding columns 8s..8s+7 of all R
 * rows, row after row: element (r, k) at byte ((k / 8) * R + r) * 16 + (k % 8) * 2. Then
 *   - core matrices next to each other along R are 128 bytes apart (the "stride byte offset"),
 *   - core matrices next to each other along K are R * 16 bytes apart (the "leading byte offset"),
 * and one TMA box of 8 columns x R rows fills exactly one slab.
 * The same slabs serve an operand that wgmma must read "MN-major" (transposed: V in O = P V, whose
 * K dimension is the keys, V's rows). A core matrix is then 8 keys of 8 contiguous columns, again
 * one 128-byte block of a slab, and the two offsets keep their meaning along K and along N: the
 * leading offset (next 8 keys) is 128 bytes, the stride offset (next 8 columns, the next slab) is
 * R * 16 bytes. tests/test_hopper_plumbing.cu checks both forms on the GPU, and that the offsets
 * swapped give a wrong product. (The 128-byte swizzle that the
 * fast kernels use is a later step; its layout differs only in these offsets and the mode bits.)
 *
 * Everything here needs sm_90a (`-arch=sm_90a`, CMAKE_CUDA_ARCHITECTURES 90a): wgmma and setmaxnreg
 * exist only on the architecture-specific target. */
#ifndef FLASHLAB_HOPPER_CUH
#define FLASHLAB_HOPPER_CUH

#include <cuda.h> /* CUtensorMap and its enums (types only: nothing links against libcuda) */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <stdint.h>

#include "error.h"

// ---- shared-memory addresses -----------------------------------------------------------------------

// The 32-bit shared-memory address of a generic pointer into shared memory (what PTX's
// .shared::cta operands take).
__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

// The block's dynamic shared memory as a Smem struct whose tiles need 1024-byte alignment (the
// 128-byte swizzle repeats every 1024 bytes; the launch asks for sizeof(Smem) + 1024 bytes). The
// base is rounded up as a 32-bit shared-memory address and turned back into a pointer with
// cvta.shared.to.generic, which the compiler follows: its plain loads and stores of the struct stay
// LDS and STS with 32-bit addresses (rounding the generic 64-bit address as an integer made them
// generic LD / ST), and the rounding stays in uniform registers (adding a runtime offset to the
// __shared__ array instead moved address arithmetic into every thread's registers).
template <typename Smem> __device__ __forceinline__ Smem &aligned_smem()
{
    extern __shared__ __align__(16) uint8_t smem_raw[];
    const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    return *reinterpret_cast<Smem *>(__cvta_shared_to_generic(base));
}

// ---- mbarrier --------------------------------------------------------------------------------------

// Initialises the barrier at bar for `count` arriving threads per phase. One thread calls it; then
// fence_barrier_init() and a __syncthreads() make it visible to the other threads and to TMA.
__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

// Makes barrier initialisations visible to the asynchronous proxy (the TMA unit).
__device__ __forceinline__ void fence_barrier_init()
{
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// This thread arrives on bar and announces `bytes` more bytes that copies will deliver in this
// phase: the phase completes when every thread has arrived and all the bytes have landed.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t *bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}

// This thread arrives on bar (a consumer telling the producer that a buffer is free).
__device__ __forceinline__ void mbar_arrive(uint64_t *bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Waits until the phase with parity `phase` (0, 1, 0, ... for successive phases) of bar is complete.
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t phase)
{
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(smem_addr(bar)), "r"(phase)
                     : "memory");
}

// ---- TMA ---------------------------------------------------------------------------------------------

// Copies the box at coordinates (x = column, y = row) of the tensor described by map into shared
// memory at dst; the bytes are counted on bar (its expect_tx must include them). One thread issues
// it. map must live in global, constant or kernel-parameter memory (a __grid_constant__ argument).
__device__ __forceinline__ void tma_load_2d(void *dst, const CUtensorMap *map, int x, int y, uint64_t *bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];" ::"r"(smem_addr(dst)),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_addr(bar))
                 : "memory");
}

// The same for a 3-D tensor: box at (x = column, y = row, z = matrix). Stage 14 views q, k, v as
// (B * H) matrices of T rows, so a box that runs past row T of its head is zero-filled instead of
// reading the next head's rows.
__device__ __forceinline__ void tma_load_3d(void *dst, const CUtensorMap *map, int x, int y, int z, uint64_t *bar)
{
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(smem_addr(dst)),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(smem_addr(bar))
                 : "memory");
}

// A tensor map for a row-major bf16 matrix of `rows` x `cols` at base (cols * 2 bytes a row, a
// multiple of 16) whose boxes are box_cols x box_rows (box_cols * 2 bytes a multiple of 16), no
// swizzle; reads outside the matrix fill zeros. FL_BAD_INPUT with the driver's status when the
// driver refuses it.
// How a TMA box is laid out in shared memory: as it is (rows of box_cols * 2 bytes), or with the
// 128-byte swizzle (box_cols = 64: rows of 128 bytes whose 16-byte chunk c lands at c ^ (row % 8)).
enum TmaSwizzle { TMA_PLAIN = 0, TMA_SWIZZLE_128B = 1 };

static inline int tma_map_bf16(CUtensorMap *map, const void *base, uint64_t mats, uint64_t rows, uint64_t cols,
                               uint32_t box_rows, uint32_t box_cols, FlError *err, TmaSwizzle swizzle = TMA_PLAIN);

static inline int tma_map_bf16_2d(CUtensorMap *map, const void *base, uint64_t rows, uint64_t cols,
                                  uint32_t box_rows, uint32_t box_cols, FlError *err)
{
    return tma_map_bf16(map, base, 0, rows, cols, box_rows, box_cols, err);
}

// A 3-D tensor map: `mats` row-major matrices of rows x cols, one after the other (boxes of one
// matrix at a time); mats = 0 makes the 2-D map above.
static inline int tma_map_bf16(CUtensorMap *map, const void *base, uint64_t mats, uint64_t rows, uint64_t cols,
                               uint32_t box_rows, uint32_t box_cols, FlError *err, TmaSwizzle swizzle)
{
    static PFN_cuTensorMapEncodeTiled_v12000 encode;
    if (!encode) {
        cudaDriverEntryPointQueryResult found;
        void *fn = NULL;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
                cudaSuccess ||
            found != cudaDriverEntryPointSuccess || !fn)
            return fl_fail(err, FL_BAD_INPUT, "TMA: the driver has no cuTensorMapEncodeTiled (CUDA 12.0+ needed)");
        encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
    }
    const cuuint32_t rank = mats ? 3 : 2;
    const cuuint64_t dims[3] = {cols, rows, mats};          // innermost first
    const cuuint64_t strides[2] = {cols * 2, rows * cols * 2}; // bytes between rows, between matrices
    const cuuint32_t box[3] = {box_cols, box_rows, 1};
    const cuuint32_t element_strides[3] = {1, 1, 1};
    const CUresult rc = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, const_cast<void *>(base), dims, strides,
                               box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                               swizzle == TMA_SWIZZLE_128B ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (rc != CUDA_SUCCESS)
        return fl_fail(err, FL_BAD_INPUT, "TMA: cuTensorMapEncodeTiled refused a %llu x %llu box %u x %u (status %d)",
                       (unsigned long long)rows, (unsigned long long)cols, box_rows, box_cols, (int)rc);
    return FL_OK;
}

// ---- wgmma -------------------------------------------------------------------------------------------

// The matrix descriptor of a K-major, unswizzled operand tile whose first core matrix is at p
// (layout at the top of this file): start address, leading byte offset (next core matrix along K)
// and stride byte offset (next core matrix along M or N), each in 16-byte units; swizzle mode 0.
__device__ __forceinline__ uint64_t wgmma_desc(const void *p, uint32_t lead_bytes, uint32_t stride_bytes)
{
    uint64_t d = 0;
    d |= (uint64_t)((smem_addr(p) & 0x3FFFF) >> 4);
    d |= (uint64_t)((lead_bytes >> 4) & 0x3FFF) << 16;
    d |= (uint64_t)((stride_bytes >> 4) & 0x3FFF) << 32;
    return d;
}

// The descriptor of an operand tile in the 128-byte swizzled layout: blocks of 64 columns (128 bytes
// a row, as TMA_SWIZZLE_128B writes them; each block 1024-byte aligned), 8-row groups 1024 bytes
// apart. K-major (Q, K): stride_bytes = 1024 between 8-row groups, lead_bytes unused (one wgmma's
// K = 16 columns never leaves a block); the k-th 16 columns of a block start 32 k bytes on, and the
// hardware applies the swizzle to the address it forms. MN-major (V, its K = keys along the rows):
// lead_bytes steps between 64-column blocks (along N) and stride_bytes = 1024 between 8-key groups
// (along K), the other way round from the unswizzled MN-major layout; tests/test_hopper_plumbing.cu
// checks both orders on the GPU.
__device__ __forceinline__ uint64_t wgmma_desc_sw128(const void *p, uint32_t lead_bytes, uint32_t stride_bytes)
{
    return wgmma_desc(p, lead_bytes, stride_bytes) | (1ull << 62); // layout type 1: 128-byte swizzle
}

// Makes this thread's ordinary shared-memory stores visible to the asynchronous proxy (wgmma and
// TMA read shared memory through it): a tile written by threads, then read by a wgmma, needs this
// fence in every writing thread before the barrier that orders the two.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Orders this thread's register writes to the accumulators before the warpgroup's next wgmma.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
// Closes the group of wgmmas issued so far.
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Waits until at most N committed groups are still running.
template <int N> __device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Ties the accumulator registers d to this point of the program. A wgmma's results are the outputs of
// its asm statement, so the compiler takes them as ready at once and may move a read of them above
// the wgmma_wait that makes them so; call this right after the wait, and it cannot.
template <int N> __device__ __forceinline__ void wgmma_fence_operand(float (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

// The accumulator operands of a wgmma: each thread's N / 2 floats d[0..], as "+f" constraints, and
// their places in the instruction's text. (Inline PTX names every register; these macros only
// spell the lists out once.)
#define FL_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                 "+f"(d[i + 6]), "+f"(d[i + 7])
#define FL_D32 FL_D8(0), FL_D8(8), FL_D8(16), FL_D8(24)
#define FL_D64 FL_D32, FL_D8(32), FL_D8(40), FL_D8(48), FL_D8(56)
#define FL_D16 FL_D8(0), FL_D8(8)
#define FL_D128 FL_D64, FL_D8(64), FL_D8(72), FL_D8(80), FL_D8(88), FL_D8(96), FL_D8(104), FL_D8(112), FL_D8(120)
#define FL_R16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define FL_R128 "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
                 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
                 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
                 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" "}"
#define FL_R32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "  \
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define FL_R64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "  \
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "  \
               "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "  \
               "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// D (64 x N, float32) = A B^T (+ D when accumulate), A (64 x 16) and B (N x 16) bf16, both in
// shared memory (descriptors a, b); N = 32, 64, 128 or 256. By default both are K-major (K contiguous);
// TRANS_A / TRANS_B = 1 reads that operand MN-major instead (its M or N contiguous, as a tile
// stored transposed is: the backward's dS^T and K in dQ = dS K). The warpgroup's 128 threads each
// hold N / 2 floats of D: thread t of warp w, with g = (t % 32) / 4 and q = t % 4, holds for
// j = 0 .. N / 8 - 1
//   d[4j + 0], d[4j + 1]   row 16 w + g,     columns 8 j + 2 q, 8 j + 2 q + 1
//   d[4j + 2], d[4j + 3]   row 16 w + g + 8, the same columns
// (the mma.sync m16n8 C fragment of mma.cuh, repeated over N / 8 column blocks and 4 warps). A wider
// N reads A from shared memory fewer times per multiply-add.
//
// Every width is the same instruction with its own operand list, so one macro writes them:
// FL_WGMMA_SS(N, N / 2, accumulator operands, their names in the text, then the names of the operands
// after them: a, b, accumulate, TRANS_A, TRANS_B). Stage 14 uses N = 64 and 128; stage 17 N = 32 (a
// warpgroup's half of a 64-key score tile) and 256 (P V over 256 value columns).
#define FL_WGMMA_SS(N, NREG, DLIST, RLIST, A, B, ACC, TA, TB)                                                 \
    template <int TRANS_A = 0, int TRANS_B = 0>                                                                \
    __device__ __forceinline__ void wgmma_m64n##N##k16_bf16(float d[NREG], uint64_t a, uint64_t b, int accumulate) \
    {                                                                                                          \
        asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, " ACC ", 0;\n\t"                                  \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 " RLIST ", " A ", " B              \
                     ", p, 1, 1, " TA ", " TB ";\n\t}"                                                          \
                     : DLIST                                                                                   \
                     : "l"(a), "l"(b), "r"(accumulate), "n"(TRANS_A), "n"(TRANS_B));                          \
    }
FL_WGMMA_SS(32, 16, FL_D16, FL_R16, "%16", "%17", "%18", "%19", "%20")
FL_WGMMA_SS(64, 32, FL_D32, FL_R32, "%32", "%33", "%34", "%35", "%36")
FL_WGMMA_SS(128, 64, FL_D64, FL_R64, "%64", "%65", "%66", "%67", "%68")
FL_WGMMA_SS(256, 128, FL_D128, FL_R128, "%128", "%129", "%130", "%131", "%132")

// D (64 x N, float32) (+)= A B, A (64 x 16, bf16) from registers, B (16 x N, bf16) in shared
// memory "MN-major" (its N columns contiguous, as V's rows are: descriptor b with the transpose
// bit set). A's four registers per thread are the mma.sync m16n8k16 A fragment of rows
// 16 w .. 16 w + 15 (mma.cuh): a0 (row g, k 2q..2q+1), a1 (row g+8, same k), a2 (row g,
// k 2q+8..2q+9), a3 (row g+8, same k). Two neighbouring 8-column blocks of a D accumulator above
// hold exactly such a fragment: that is how P goes from S = Q K^T into O += P V in registers.
// N = 64 or 128; FL_WGMMA_RS(N, N / 2, accumulator operands, their names, then the names of a's four registers,
// b and accumulate).
#define FL_WGMMA_RS(N, NREG, DLIST, RLIST, A0, A1, A2, A3, B, ACC)                                           \
    __device__ __forceinline__ void wgmma_m64n##N##k16_bf16_rs(float d[NREG], const uint32_t a[4], uint64_t b, \
                                                              int accumulate)                               \
    {                                                                                                          \
        asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, " ACC ", 0;\n\t"                                  \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 " RLIST ", {" A0 ", " A1 ", " A2 \
                     ", " A3 "}, " B ", p, 1, 1, 1;\n\t}"                                                        \
                     : DLIST                                                                                   \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));                  \
    }
FL_WGMMA_RS(64, 32, FL_D32, FL_R32, "%32", "%33", "%34", "%35", "%36", "%37")
FL_WGMMA_RS(128, 64, FL_D64, FL_R64, "%64", "%65", "%66", "%67", "%68", "%69")

// ---- named barriers ---------------------------------------------------------------------------------

// Barrier `id` (1..15; 0 is __syncthreads) of `count` threads: this thread waits until count threads
// have reached it, by waiting here or by arriving below. Two warpgroups use a pair of them to take
// turns ("ping-pong").
__device__ __forceinline__ void named_barrier_sync(int id, int count)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
// Counts this thread at barrier `id` without waiting.
__device__ __forceinline__ void named_barrier_arrive(int id, int count)
{
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// ---- register reallocation -----------------------------------------------------------------------

// The warpgroup gives back registers down to N per thread (a producer that only issues TMA copies).
template <int N> __device__ __forceinline__ void regs_release() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N)); }
// The warpgroup asks for N registers per thread (consumers holding accumulators).
template <int N> __device__ __forceinline__ void regs_acquire() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N)); }

// Whether a block of one producer warpgroup and `consumers` consumer warpgroups may move to these
// counts. The block's pool is what its launch gave it: threads x the kernel's count, which for a
// kernel with setmaxnreg ptxas makes the most 64 K / threads allows, rounded down to a multiple of 8
// (168 at 384 threads, 128 at 512). Asking for more than the pool holds does not fail: the
// consumers' setmaxnreg.inc waits for registers that never come, and the kernel hangs.
constexpr bool regs_fit(int consumers, int producer_regs, int consumer_regs)
{
    const int threads = 128 * (1 + consumers), per_thread = 65536 / threads / 8 * 8;
    return 128 * producer_regs + 128 * consumers * consumer_regs <= threads * per_thread;
}

#endif
