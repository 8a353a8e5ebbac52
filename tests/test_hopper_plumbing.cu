/* test_hopper_plumbing.cu — the pieces of common/hopper.cuh working together, before any attention
 * kernel uses them: one warpgroup computes C = A B^T for A, B (64 x 64, bf16, row-major in global
 * memory). One thread issues 16 TMA copies (8-column slabs of A and B, the layout of hopper.cuh)
 * that all complete on one mbarrier; the 128 threads wait on its phase, then issue four
 * wgmma m64n64k16 (one per 16 columns of K), commit, wait, and write C from the documented
 * accumulator layout. Checked against a float64 product of the same bf16 values: every element
 * within 1e-3 relative (float32 accumulation of 64 products).
 *
 * Then the other form the attention kernels need, O = P V: A (64 x 64) from registers in the
 * mma.sync A-fragment layout, B = V (keys x 64) "MN-major" (V's rows, columns contiguous), loaded
 * by 3-D TMA boxes from the second of two 40-row matrices, so keys 40..63 of the box must arrive as
 * zeros: C2 = P[:, :40] V[1]. The MN-major descriptor is tried with its two byte offsets in both
 * orders, and the test says which order the hardware takes (only the documented one may match).
 *
 * Last, the same two products in the 128-byte swizzled layout the fast kernels use (TMA boxes of 64
 * columns written with TMA_SWIZZLE_128B): A B^T with K = 128 (two 64-column blocks, the k-th 16
 * columns of a block addressed 32 k bytes on), and P V with N = 128 by the N = 128 instructions,
 * again trying the MN-major offsets in both orders. And the backward's dQ = dS K: both operands
 * from shared memory read MN-major (the transpose bits of the SS form), A stored as its transpose
 * (64 K-rows of 64 M-columns, one swizzled block), B as 64 K-rows of 128 N-columns.
 *
 * A wrong descriptor offset, slab address or fragment layout gives wrong elements, and the test
 * names the first. Exit 0 pass, 1 wrong, 2 a CUDA or driver error, 77 no compute-capability-9.0
 * device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "hopper.cuh"

enum { M = 64, N = 64, K = 64, SLABS = K / 8 };

// Thread 0 sets up the barrier for one arrival (plus the TMA bytes); everyone sees it after this.
__device__ void init_barrier(uint64_t *bar)
{
    if (threadIdx.x == 0) {
        mbar_init(bar, 1);
        fence_barrier_init();
    }
    __syncthreads();
}

// Writes the warpgroup's accumulator d (64 x cols, the layout of hopper.cuh) to c, row-major.
__device__ void store_c(const float *d, float *c, int cols)
{
    const int w = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, q = threadIdx.x % 4, r0 = 16 * w + g;
    for (int j = 0; j < cols / 8; j++) {
        const int col = 8 * j + 2 * q;
        c[r0 * cols + col] = d[4 * j + 0];
        c[r0 * cols + col + 1] = d[4 * j + 1];
        c[(r0 + 8) * cols + col] = d[4 * j + 2];
        c[(r0 + 8) * cols + col + 1] = d[4 * j + 3];
    }
}

// A and B as K/8 slabs of 8 columns each, rows contiguous (hopper.cuh): 8 KiB each.
struct Tiles {
    alignas(128) __nv_bfloat16 a[SLABS][M][8];
    alignas(128) __nv_bfloat16 b[SLABS][N][8];
    alignas(8) uint64_t full;
};

__global__ void __launch_bounds__(128) abt_kernel(const __grid_constant__ CUtensorMap map_a,
                                                  const __grid_constant__ CUtensorMap map_b, float *c)
{
    __shared__ Tiles t;
    const int tid = threadIdx.x;
    init_barrier(&t.full);
    if (tid == 0) {
        mbar_arrive_expect_tx(&t.full, (M + N) * K * sizeof(__nv_bfloat16));
        for (int s = 0; s < SLABS; s++) {
            tma_load_2d(&t.a[s][0][0], &map_a, 8 * s, 0, &t.full);
            tma_load_2d(&t.b[s][0][0], &map_b, 8 * s, 0, &t.full);
        }
    }
    mbar_wait(&t.full, 0);

    float d[32];
    for (int i = 0; i < 32; i++)
        d[i] = 0.0f;
    wgmma_fence();
    for (int k16 = 0; k16 < K / 16; k16++) { // slabs 2 k16 and 2 k16 + 1
        const uint64_t da = wgmma_desc(&t.a[2 * k16][0][0], M * 16, 128);
        const uint64_t db = wgmma_desc(&t.b[2 * k16][0][0], N * 16, 128);
        wgmma_m64n64k16_bf16(d, da, db, k16 > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    store_c(d, c, N);
}

enum { V_ROWS = 40 }; // rows of each of V's two matrices: a 64-row box runs 24 rows past the end

struct PvTiles {
    alignas(128) __nv_bfloat16 v[SLABS][K][8]; // V (keys x 64 columns) as 8 slabs of 8 columns
    alignas(8) uint64_t full;
};

// C2 = P V: p (64 x 64 bf16, row-major) from global straight into A fragments, V through TMA.
// lead / stride: the descriptor's byte offsets for the MN-major V tile.
__global__ void __launch_bounds__(128) pv_kernel(const __grid_constant__ CUtensorMap map_v, const __nv_bfloat16 *p,
                                                 float *c, uint32_t lead, uint32_t stride)
{
    __shared__ PvTiles t;
    const int tid = threadIdx.x;
    init_barrier(&t.full);
    if (tid == 0) {
        mbar_arrive_expect_tx(&t.full, K * N * sizeof(__nv_bfloat16)); // the zero-filled rows count too
        for (int s = 0; s < SLABS; s++)
            tma_load_3d(&t.v[s][0][0], &map_v, 8 * s, 0, 1, &t.full);
    }
    mbar_wait(&t.full, 0);

    const int w = tid / 32, g = (tid % 32) / 4, q = tid % 4, r0 = 16 * w + g;
    const auto pair = [&](int row, int col) { // two bf16 of P along k, packed as the fragment wants
        __nv_bfloat162 x;
        x.x = p[row * K + col];
        x.y = p[row * K + col + 1];
        return *reinterpret_cast<uint32_t *>(&x);
    };
    float d[32];
    for (int i = 0; i < 32; i++)
        d[i] = 0.0f;
    uint32_t a[K / 16][4]; // every A fragment first: no register of a wgmma operand changes between them
    for (int k16 = 0; k16 < K / 16; k16++) {
        const int k0 = 16 * k16 + 2 * q;
        a[k16][0] = pair(r0, k0), a[k16][1] = pair(r0 + 8, k0);
        a[k16][2] = pair(r0, k0 + 8), a[k16][3] = pair(r0 + 8, k0 + 8);
    }
    wgmma_fence();
    for (int k16 = 0; k16 < K / 16; k16++) // keys 16 k16 ..: two core matrices along K in every slab
        wgmma_m64n64k16_bf16_rs(d, a[k16], wgmma_desc(&t.v[0][16 * k16][0], lead, stride), k16 > 0);
    wgmma_commit();
    wgmma_wait<0>();
    store_c(d, c, N);
}

static int cuda_ok(cudaError_t e, const char *what);

// ---- the 128-byte swizzled layout ----
enum { KW = 128, CB = KW / 64 }; // the swizzled products' K (A B^T) and N (P V): two 64-column blocks

struct SwTiles {
    alignas(1024) __nv_bfloat16 a[CB][M][64]; // A (64 x 128) as two swizzled 64-column blocks
    alignas(1024) __nv_bfloat16 b[CB][N][64]; // B (64 x 128), or V (64 keys x 128 columns)
    alignas(8) uint64_t full;
};

// The products swizzled_kernel computes.
enum SwProduct {
    SW_ABT = 0,       // C = A B^T (K = 128), both K-major
    SW_PV = 1,        // C = P V, P (64 x 64) from global in A fragments, V's 128 columns MN-major
    SW_TRANSPOSED = 2 // C = A B, A stored transposed (its block 0 as K rows of M columns) and B
                      // (V's tiles) both read MN-major from shared memory: the backward's dS K
};

// One product of SwProduct in the swizzled layout; lead / stride: V's (B's) descriptor offsets in
// SW_PV and SW_TRANSPOSED.
__global__ void __launch_bounds__(128) swizzled_kernel(const __grid_constant__ CUtensorMap map_a,
                                                       const __grid_constant__ CUtensorMap map_b, const __nv_bfloat16 *p,
                                                       float *c, int product, uint32_t lead, uint32_t stride)
{
    extern __shared__ uint8_t raw[];
    SwTiles &t = *reinterpret_cast<SwTiles *>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
    const int tid = threadIdx.x;
    init_barrier(&t.full);
    const int pv = product == SW_PV;
    if (tid == 0) {
        mbar_arrive_expect_tx(&t.full, pv ? sizeof t.b : sizeof t.a + sizeof t.b);
        for (int cb = 0; cb < CB; cb++) {
            if (!pv)
                tma_load_2d(&t.a[cb][0][0], &map_a, 64 * cb, 0, &t.full);
            tma_load_2d(&t.b[cb][0][0], &map_b, 64 * cb, 0, &t.full);
        }
    }
    mbar_wait(&t.full, 0);
    const int w = tid / 32, g = (tid % 32) / 4, q = tid % 4, r0 = 16 * w + g;
    const int cols = product == SW_ABT ? N : KW;
    float d[64];
    for (int i = 0; i < 64; i++)
        d[i] = 0.0f;
    if (product == SW_TRANSPOSED) {
        wgmma_fence();
        for (int k16 = 0; k16 < K / 16; k16++) { // K rows 16 k16 .. of A's block 0 and of B's blocks
            const uint64_t da = wgmma_desc_sw128(&t.a[0][16 * k16][0], M * 128, 1024);
            const uint64_t db = wgmma_desc_sw128(&t.b[0][16 * k16][0], lead, stride);
            wgmma_m64n128k16_bf16<1, 1>(d, da, db, k16 > 0);
        }
    } else if (product == SW_ABT) {
        wgmma_fence();
        for (int k16 = 0; k16 < KW / 16; k16++) {
            const int cb = k16 / 4, kk = k16 % 4;
            const uint64_t da = wgmma_desc_sw128(reinterpret_cast<const char *>(&t.a[cb][0][0]) + 32 * kk, 16, 1024);
            const uint64_t db = wgmma_desc_sw128(reinterpret_cast<const char *>(&t.b[cb][0][0]) + 32 * kk, 16, 1024);
            wgmma_m64n64k16_bf16(d, da, db, k16 > 0);
        }
    } else {
        uint32_t a[K / 16][4];
        for (int k16 = 0; k16 < K / 16; k16++)
            for (int x = 0; x < 4; x++) {
                const int row = r0 + 8 * (x % 2), col = 16 * k16 + 2 * q + 8 * (x / 2);
                __nv_bfloat162 v2;
                v2.x = p[row * K + col], v2.y = p[row * K + col + 1];
                a[k16][x] = *reinterpret_cast<uint32_t *>(&v2);
            }
        wgmma_fence();
        for (int k16 = 0; k16 < K / 16; k16++) // keys 16 k16 ..: rows 16 k16 .. of every block
            wgmma_m64n128k16_bf16_rs(d, a[k16], wgmma_desc_sw128(&t.b[0][16 * k16][0], lead, stride), k16 > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    store_c(d, c, cols);
}

// Runs swizzled_kernel and counts the elements of C (64 x cols) that differ from want.
static int swizzled_wrong(const CUtensorMap &ma, const CUtensorMap &mb, const __nv_bfloat16 *dp, float *dc, int product,
                          uint32_t lead, uint32_t stride, const double *want, int cols, int *failed)
{
    static float hc[M * KW];
    const size_t smem = sizeof(SwTiles) + 1024;
    if (!cuda_ok(cudaFuncSetAttribute(swizzled_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                 "smem attribute") ||
        !cuda_ok(cudaMemset(dc, 0xff, M * KW * sizeof(float)), "poison C")) {
        *failed = 1;
        return -1;
    }
    swizzled_kernel<<<1, 128, smem>>>(ma, mb, dp, dc, product, lead, stride);
    if (!cuda_ok(cudaGetLastError(), "launch") || !cuda_ok(cudaDeviceSynchronize(), "swizzled_kernel") ||
        !cuda_ok(cudaMemcpy(hc, dc, M * cols * sizeof(float), cudaMemcpyDeviceToHost), "copy C")) {
        *failed = 1;
        return -1;
    }
    int wrong = 0;
    for (int i = 0; i < M * cols; i++)
        if (!(fabs(hc[i] - want[i]) <= 1e-3 * fabs(want[i]) + 1e-3))
            wrong++;
    return wrong;
}

static int cuda_ok(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 1;
    fprintf(stderr, "test_hopper_plumbing: %s: %s\n", what, cudaGetErrorString(e));
    return 0;
}

int main(void)
{
    int dev = 0, count = 0;
    cudaDeviceProp prop;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0 || cudaGetDeviceProperties(&prop, dev) != cudaSuccess ||
        prop.major != 9) {
        printf("test_hopper_plumbing: no compute-capability-9.0 device: skipped\n");
        return 77;
    }
    __nv_bfloat16 ha[M * K], hb[N * K];
    srand(14);
    for (int i = 0; i < M * K; i++)
        ha[i] = __float2bfloat16((float)(rand() % 17 - 8) / 8.0f);
    for (int i = 0; i < N * K; i++)
        hb[i] = __float2bfloat16((float)(rand() % 13 - 6) / 4.0f);
    __nv_bfloat16 *da = NULL, *db = NULL;
    float *dc = NULL;
    if (!cuda_ok(cudaMalloc(&da, sizeof ha), "cudaMalloc") || !cuda_ok(cudaMalloc(&db, sizeof hb), "cudaMalloc") ||
        !cuda_ok(cudaMalloc(&dc, M * N * sizeof(float)), "cudaMalloc") ||
        !cuda_ok(cudaMemcpy(da, ha, sizeof ha, cudaMemcpyHostToDevice), "copy A") ||
        !cuda_ok(cudaMemcpy(db, hb, sizeof hb, cudaMemcpyHostToDevice), "copy B") ||
        !cuda_ok(cudaMemset(dc, 0xff, M * N * sizeof(float)), "poison C"))
        return 2;
    CUtensorMap map_a, map_b;
    FlError err = {{0}};
    if (tma_map_bf16_2d(&map_a, da, M, K, M, 8, &err) != FL_OK ||
        tma_map_bf16_2d(&map_b, db, N, K, N, 8, &err) != FL_OK) {
        fprintf(stderr, "test_hopper_plumbing: %s\n", err.msg);
        return 2;
    }
    abt_kernel<<<1, 128>>>(map_a, map_b, dc);
    if (!cuda_ok(cudaGetLastError(), "launch") || !cuda_ok(cudaDeviceSynchronize(), "abt_kernel"))
        return 2;
    static float hc[M * N];
    if (!cuda_ok(cudaMemcpy(hc, dc, sizeof hc, cudaMemcpyDeviceToHost), "copy C"))
        return 2;
    int wrong = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double want = 0.0;
            for (int k = 0; k < K; k++)
                want += (double)__bfloat162float(ha[i * K + k]) * (double)__bfloat162float(hb[j * K + k]);
            const float got = hc[i * N + j];
            if (!(fabs(got - want) <= 1e-3 * fabs(want) + 1e-3)) {
                if (wrong++ < 5)
                    fprintf(stderr, "test_hopper_plumbing: C[%d][%d] = %g, want %g\n", i, j, got, want);
            }
        }
    printf("test_hopper_plumbing: TMA + mbarrier + wgmma m64n64k16 (A, B in shared memory): %d of %d elements wrong\n",
           wrong, M * N);

    // ---- O = P V: A from registers, MN-major B, 3-D TMA with zero fill ----
    static __nv_bfloat16 hp[M * K], hv[2 * V_ROWS * N];
    for (int i = 0; i < M * K; i++)
        hp[i] = __float2bfloat16((float)(rand() % 9) / 8.0f);
    for (int i = 0; i < 2 * V_ROWS * N; i++)
        hv[i] = __float2bfloat16((float)(rand() % 11 - 5) / 4.0f);
    __nv_bfloat16 *dp = NULL, *dv = NULL;
    if (!cuda_ok(cudaMalloc(&dp, sizeof hp), "cudaMalloc") || !cuda_ok(cudaMalloc(&dv, sizeof hv), "cudaMalloc") ||
        !cuda_ok(cudaMemcpy(dp, hp, sizeof hp, cudaMemcpyHostToDevice), "copy P") ||
        !cuda_ok(cudaMemcpy(dv, hv, sizeof hv, cudaMemcpyHostToDevice), "copy V"))
        return 2;
    CUtensorMap map_v;
    if (tma_map_bf16(&map_v, dv, 2, V_ROWS, N, K, 8, &err) != FL_OK) {
        fprintf(stderr, "test_hopper_plumbing: %s\n", err.msg);
        return 2;
    }
    // The documented order for MN-major: leading offset = next core matrix along K (keys, 128 B
    // on), stride offset = next along N (the next 8-column slab, K * 16 B on). Then swapped.
    const uint32_t orders[2][2] = {{128, K * 16}, {K * 16, 128}};
    int wrong_pv[2];
    for (int o = 0; o < 2; o++) {
        if (!cuda_ok(cudaMemset(dc, 0xff, M * N * sizeof(float)), "poison C"))
            return 2;
        pv_kernel<<<1, 128>>>(map_v, dp, dc, orders[o][0], orders[o][1]);
        if (!cuda_ok(cudaGetLastError(), "launch") || !cuda_ok(cudaDeviceSynchronize(), "pv_kernel") ||
            !cuda_ok(cudaMemcpy(hc, dc, sizeof hc, cudaMemcpyDeviceToHost), "copy C"))
            return 2;
        wrong_pv[o] = 0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double want = 0.0;
                for (int k = 0; k < V_ROWS; k++)
                    want += (double)__bfloat162float(hp[i * K + k]) * (double)__bfloat162float(hv[(V_ROWS + k) * N + j]);
                const float got = hc[i * N + j];
                if (!(fabs(got - want) <= 1e-3 * fabs(want) + 1e-3) && wrong_pv[o]++ < 3 && o == 0)
                    fprintf(stderr, "test_hopper_plumbing: P V [%d][%d] = %g, want %g\n", i, j, got, want);
            }
        printf("test_hopper_plumbing: wgmma m64n64k16 P V (A in registers, MN-major B, leading %u B, stride %u B): "
               "%d of %d elements wrong\n", orders[o][0], orders[o][1], wrong_pv[o], M * N);
    }

    // ---- the swizzled layout: A B^T with K = 128, P V with N = 128 ----
    static __nv_bfloat16 ha2[M * KW], hb2[N * KW], hv2[K * KW];
    for (int i = 0; i < M * KW; i++)
        ha2[i] = __float2bfloat16((float)(rand() % 17 - 8) / 8.0f);
    for (int i = 0; i < N * KW; i++)
        hb2[i] = __float2bfloat16((float)(rand() % 13 - 6) / 4.0f);
    for (int i = 0; i < K * KW; i++)
        hv2[i] = __float2bfloat16((float)(rand() % 11 - 5) / 4.0f);
    __nv_bfloat16 *da2 = NULL, *db2 = NULL, *dv2 = NULL;
    float *dc2 = NULL;
    if (!cuda_ok(cudaMalloc(&da2, sizeof ha2), "cudaMalloc") || !cuda_ok(cudaMalloc(&db2, sizeof hb2), "cudaMalloc") ||
        !cuda_ok(cudaMalloc(&dv2, sizeof hv2), "cudaMalloc") || !cuda_ok(cudaMalloc(&dc2, M * KW * sizeof(float)), "cudaMalloc") ||
        !cuda_ok(cudaMemcpy(da2, ha2, sizeof ha2, cudaMemcpyHostToDevice), "copy") ||
        !cuda_ok(cudaMemcpy(db2, hb2, sizeof hb2, cudaMemcpyHostToDevice), "copy") ||
        !cuda_ok(cudaMemcpy(dv2, hv2, sizeof hv2, cudaMemcpyHostToDevice), "copy"))
        return 2;
    CUtensorMap ma2, mb2, mv2;
    if (tma_map_bf16(&ma2, da2, 0, M, KW, M, 64, &err, TMA_SWIZZLE_128B) != FL_OK ||
        tma_map_bf16(&mb2, db2, 0, N, KW, N, 64, &err, TMA_SWIZZLE_128B) != FL_OK ||
        tma_map_bf16(&mv2, dv2, 0, K, KW, K, 64, &err, TMA_SWIZZLE_128B) != FL_OK) {
        fprintf(stderr, "test_hopper_plumbing: %s\n", err.msg);
        return 2;
    }
    static double want_abt[M * N], want_pv[M * KW], want_t[M * KW];
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double acc = 0.0;
            for (int k = 0; k < KW; k++)
                acc += (double)__bfloat162float(ha2[i * KW + k]) * (double)__bfloat162float(hb2[j * KW + k]);
            want_abt[i * N + j] = acc;
        }
        for (int j = 0; j < KW; j++) {
            double acc = 0.0;
            for (int k = 0; k < K; k++)
                acc += (double)__bfloat162float(hp[i * K + k]) * (double)__bfloat162float(hv2[k * KW + j]);
            want_pv[i * KW + j] = acc;
            acc = 0.0; // A[i][k] stored transposed: row k, column i of A's first block
            for (int k = 0; k < K; k++)
                acc += (double)__bfloat162float(ha2[k * KW + i]) * (double)__bfloat162float(hv2[k * KW + j]);
            want_t[i * KW + j] = acc;
        }
    }
    int failed = 0;
    const int wrong_sw = swizzled_wrong(ma2, mb2, dp, dc2, SW_ABT, 0, 0, want_abt, N, &failed);
    printf("test_hopper_plumbing: swizzled A B^T (K = 128, two 64-column blocks): %d of %d elements wrong\n", wrong_sw,
           M * N);
    // MN-major, swizzled: 64-column blocks are K * 128 bytes apart, 8-key groups 1024 bytes apart.
    // Here the leading offset steps along N (between blocks) and the stride offset along K: the
    // other way round from the unswizzled MN-major layout above. Then swapped, which must fail.
    const uint32_t sw_orders[2][2] = {{K * 128, 1024}, {1024, K * 128}};
    int wrong_swpv[2];
    for (int o = 0; o < 2; o++) {
        wrong_swpv[o] = swizzled_wrong(ma2, mv2, dp, dc2, SW_PV, sw_orders[o][0], sw_orders[o][1], want_pv, KW, &failed);
        printf("test_hopper_plumbing: swizzled P V (N = 128, MN-major, leading %u B, stride %u B): %d of %d elements "
               "wrong\n", sw_orders[o][0], sw_orders[o][1], wrong_swpv[o], M * KW);
    }
    // dS K: A and B both MN-major from shared memory, B with the offsets found above
    const int wrong_t = swizzled_wrong(ma2, mv2, dp, dc2, SW_TRANSPOSED, sw_orders[0][0], sw_orders[0][1], want_t, KW,
                                       &failed);
    printf("test_hopper_plumbing: swizzled A B with A and B MN-major in shared memory (transpose bits, N = 128): "
           "%d of %d elements wrong\n", wrong_t, M * KW);
    cudaFree(da2), cudaFree(db2), cudaFree(dv2), cudaFree(dc2);
    if (failed)
        return 2;
    cudaFree(da), cudaFree(db), cudaFree(dc), cudaFree(dp), cudaFree(dv);
    if (wrong_pv[1] == 0) // the swapped offsets must not pass too, or the check above proves nothing
        fprintf(stderr, "test_hopper_plumbing: the swapped MN-major offsets gave the right product as well\n");
    if (wrong_swpv[1] == 0)
        fprintf(stderr, "test_hopper_plumbing: the swapped swizzled MN-major offsets gave the right product as well\n");
    return wrong || wrong_pv[0] || wrong_pv[1] == 0 || wrong_sw || wrong_swpv[0] || wrong_swpv[1] == 0 || wrong_t ? 1 : 0;
}
