/* stages/17_tc_mla/tc_mla.cu — stage 09's absorbed MLA step in bf16, the latent attention on Hopper's
 * tensor cores (sm_90a). Its parent is stage 09's mla.cu (`flashlab diff 09 17`); the arithmetic,
 * rounding point by rounding point, is reference.c's.
 *
 * What changes from stage 09:
 *   - everything the step keeps is bf16 (the runner hands the stage bf16 copies of its nine inputs,
 *     MlaProblem.in_bf16, made before the timed steps): the projections are cuBLAS bf16 GEMMs with
 *     float32 sums, rounded to bf16 as they are written (y stays float32);
 *   - the latent attention is one block per work item of tiles.h (TCM_BLOCK_R = 64 stacked rows of
 *     one sequence, one split of the keys they see), and its two products run on wgmma:
 *       S  = [q_lat, q_pe] [ckv_j, kpe_j]^T   (64 rows x 64 keys, K = m + p <= 576)
 *       Õ += P~ ckv_j                          (64 rows x m <= 512 value columns)
 *     with the cache tile in shared memory once, read as keys by the first and as values by the
 *     second (the absorbed form's whole point: the values are the keys' first m columns).
 *
 * The block: two warpgroups (256 threads), c = 0 and 1, with no producer warpgroup: Õ alone is 128
 * registers a thread, and a kernel of 384 threads is compiled for 168 registers at most.
 *   loads              thread 0 loads the block's rows of [q_lat, q_pe] once, and the cache tiles
 *                      into a ring of two stages, with TMA (common/hopper.cuh): tiles 0 and 1 first,
 *                      then tile j + 2 as soon as every warp has finished P~_j ckv_j, so the loads
 *                      stay a tile ahead. TMA takes DeepSeek's widths, m = 512 and p = 64, which
 *                      fill the nine 64-column blocks; other widths (the small golden cases) are
 *                      copied by warp 0 into the same layout, zero-padded.
 *   warpgroup c        computes S for keys 32c .. 32c + 31 of the tile (wgmma N = 32, K = 576 in 36
 *                      steps), and Õ for value columns 256c .. 256c + 255 (wgmma N = 256, P~ read
 *                      from shared memory). A row's running max is shared: each warpgroup has half
 *                      of the row's scores, so both post their half's max, meet at a barrier, and go
 *                      on with the same new max; P~ goes to shared memory (bf16, the rounding point),
 *                      where both warpgroups read all 64 keys of it. The row sum l stays split (each
 *                      warpgroup sums its own keys, rescaled by the same factors) until the end.
 *   The tensor cores idle during the softmax, which both warpgroups do at once (README, "The kernel").
 * Shared memory (bf16, in 64-column blocks of 64 rows, 128-byte swizzled: hopper.cuh):
 *   q  (9 blocks: 8 of q_lat, 1 of q_pe)      72 KiB, loaded once
 *   kv (2 stages x 9 blocks: ckv_j, kpe_j)   144 KiB
 *   p  (1 block: P~ of 64 rows x 64 keys)      8 KiB
 * 224 KiB of the 227 a block may have: one block per SM.
 *
 * With more than one split each block writes its rows' O_s (float32) and lse_s, and combine_kernel
 * merges them by their lse (stage 11's combine) into o_lat, rounded to bf16 there. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attn.h"
#include "bf16.h"
#include "cuda_blas.h"
#include "cuda_util.h"
#include "error.h"
#include "hopper.cuh"
#include "kind_mla_stage.h"
#include "mma.cuh"
#include "rope.h"
#include "tiles.h"
#include "workspace.h"

namespace {

constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
constexpr int ROWS = TCM_BLOCK_R, KEYS = TCM_BLOCK_C;              // a work item's rows, a tile's keys
constexpr int LAT_BLOCKS = 8, PE_BLOCK = LAT_BLOCKS, BLOCKS = 9;    // 64-column blocks: m <= 512, p <= 64
constexpr int WARPGROUPS = 2, NT = 128 * WARPGROUPS;                // 255 registers a thread (Õ alone
                                                                    // is 128 of them)
constexpr int HALF = KEYS / WARPGROUPS, VCOLS = 256;                 // a warpgroup's keys of S, columns of Õ
constexpr int STAGES = 2;                                           // cache tiles in flight
static_assert(ROWS == 64 && KEYS == 64, "one wgmma M of rows, one swizzled block of keys");

struct Smem {
    alignas(1024) uint16_t q[BLOCKS][ROWS][64];          // [q_lat, q_pe] of the block's rows
    alignas(1024) uint16_t kv[STAGES][BLOCKS][KEYS][64]; // [ckv_j, kpe_j]: keys, and values (ckv_j)
    alignas(1024) uint16_t p[ROWS][KEYS];                // P~ of the tile, bf16
    float row_part[WARPGROUPS][ROWS];                     // each warpgroup's half-row max (then l)
    uint64_t q_full, kv_full[STAGES];
};
constexpr size_t SMEM_BYTES = sizeof(Smem) + 1024; // + room to align the base to 1024 bytes

struct LatentArgs {
    const uint16_t *q_lat, *q_pe; // (B, R, m), (B, R, p) bf16, R = Tq H stacked rows (rope.h)
    const uint16_t *ckv, *kpe;    // (B, Tk, m), (B, Tk, p) bf16
    uint16_t *o_lat;              // (B, R, m) bf16, with one split
    float *part_o, *part_lse;     // (splits, B R, m), (splits, B R), with more than one
    int B, Tq, Tk, H, m, p, causal, splits;
    int tma;                      // loads by TMA (m = 512, p = 64: the blocks are full), else warp 0 copies
    float scale_log2;
    unsigned long long *hbm;
};

// The block's work item (tiles.h): stacked rows r0 .. r0 + rows - 1 of sequence b, keys
// [chunk.first, chunk.end) in n_tiles tiles.
struct Item {
    int b, r0, rows, n_tiles;
    Chunk chunk;
};

__device__ __forceinline__ Item item_of(const LatentArgs &a)
{
    Item it;
    const int R = a.Tq * a.H;
    it.b = blockIdx.z, it.r0 = blockIdx.x * ROWS, it.rows = min(ROWS, R - it.r0);
    const int block_keys = keys_seen(a.causal, it.r0 + it.rows - 1, a.H, a.Tq, a.Tk);
    it.chunk = split_chunk(block_keys, a.splits, blockIdx.y);
    it.n_tiles = ceil_div(it.chunk.end - it.chunk.first, KEYS);
    return it;
}

// ---- loading: TMA, or a warp's copies ----------------------------------------------------------------

// Rows 0 .. n - 1 of a latent matrix (row stride m) and of its RoPE part (row stride p), bf16, into
// the nine swizzled blocks at dst by the warp's 32 threads, 16 bytes at a time; columns past m and
// p and rows past n become zeros. For the widths TMA is not used for; the layout is the one TMA
// writes, so the wgmmas cannot tell the two apart.
__device__ void copy_rows_by_warp(uint16_t (*dst)[ROWS][64], const uint16_t *lat, int m, const uint16_t *pe, int p,
                                  int n, int lane)
{
    for (int at = lane; at < ROWS * BLOCKS * 8; at += 32) {
        const int r = at / (BLOCKS * 8), blk = at / 8 % BLOCKS, chunk = at % 8;
        uint32_t v[4] = {0, 0, 0, 0}; // eight bf16, two a word
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const int c = 8 * chunk + e, col = blk == PE_BLOCK ? c : 64 * blk + c;
            const bool ok = r < n && (blk == PE_BLOCK ? c < p : col < m);
            const uint32_t x = ok ? (blk == PE_BLOCK ? pe[(size_t)r * p + c] : lat[(size_t)r * m + col]) : 0;
            v[e / 2] |= x << (16 * (e % 2));
        }
        *reinterpret_cast<uint4 *>(&dst[blk][0][0] + swizzle<64>(r, 8 * chunk)) = make_uint4(v[0], v[1], v[2], v[3]);
    }
}

// The tensor maps of q_lat, q_pe, ckv, kpe (boxes of 64 rows x 64 columns, one sequence at a time).
struct Maps {
    CUtensorMap q_lat, q_pe, ckv, kpe;
};

// Loads rows [row0, row0 + n) of sequence b of a (lat, pe) pair into the nine blocks at dst, announced on
// bar: with TMA one thread (threadIdx.x 0) issues nine boxes (rows past the sequence's end read as
// zeros); else warp 0 copies, and each of its lanes arrives. Counts the n rows' bytes.
__device__ void load_rows(uint16_t (*dst)[ROWS][64], uint64_t *bar, const LatentArgs &a, const CUtensorMap &lat_map,
                          const CUtensorMap &pe_map, const uint16_t *lat, const uint16_t *pe, int seq_rows, int b,
                          int row0, int n)
{
    if (a.tma) {
        if (threadIdx.x == 0) {
            mbar_arrive_expect_tx(bar, BLOCKS * ROWS * 128);
            for (int cb = 0; cb < LAT_BLOCKS; cb++)
                tma_load_3d(&dst[cb][0][0], &lat_map, 64 * cb, row0, b, bar);
            tma_load_3d(&dst[PE_BLOCK][0][0], &pe_map, 0, row0, b, bar);
        }
    } else if (threadIdx.x < 32) {
        const size_t first = (size_t)b * seq_rows + row0;
        copy_rows_by_warp(dst, lat + first * a.m, a.m, pe + first * a.p, a.p, n, threadIdx.x);
        fence_proxy_async(); // the stores are visible to wgmma (the async proxy) ...
        mbar_arrive(bar);    // ... once every lane has arrived
    }
    if (threadIdx.x == 0)
        hbm_dev_add(a.hbm, HBM_READ, (unsigned long long)n * (a.m + a.p) * 2);
}

// The block's query rows (once).
__device__ void load_queries(Smem &sm, const LatentArgs &a, const Maps &maps, const Item &it)
{
    load_rows(sm.q, &sm.q_full, a, maps.q_lat, maps.q_pe, a.q_lat, a.q_pe, a.Tq * a.H, it.b, it.r0, it.rows);
}

// Cache tile j of the item into stage j % STAGES.
__device__ void load_tile(Smem &sm, const LatentArgs &a, const Maps &maps, const Item &it, int j)
{
    const int key0 = it.chunk.first + j * KEYS, st = j % STAGES;
    load_rows(sm.kv[st], &sm.kv_full[st], a, maps.ckv, maps.kpe, a.ckv, a.kpe, a.Tk, it.b, key0,
              min(KEYS, it.chunk.end - key0));
}

// ---- the two products ----------------------------------------------------------------------------------

// Issues S (64 rows x this warpgroup's 32 keys of stage st) = [q_lat, q_pe] [ckv_j, kpe_j]^T: four
// wgmmas of K = 16 per 64-column block, both operands K-major in shared memory, as one commit group.
// Always all nine blocks, so that the chain of wgmmas has no branch in it (the compiler would
// serialize them): a narrower m or p has zeros there (copy_rows_by_warp).
__device__ __forceinline__ void issue_scores(float (&s)[16], const Smem &sm, int c, int st)
{
    wgmma_fence();
#pragma unroll
    for (int blk = 0; blk < BLOCKS; blk++) {
#pragma unroll
        for (int k = 0; k < 4; k++) { // columns 16 k .. 16 k + 15 of the block: 32 k bytes into its rows
            const char *q = reinterpret_cast<const char *>(&sm.q[blk][0][0]) + 32 * k;
            const char *key = reinterpret_cast<const char *>(&sm.kv[st][blk][HALF * c][0]) + 32 * k;
            wgmma_m64n32k16_bf16(s, wgmma_desc_sw128(q, 16, 1024), wgmma_desc_sw128(key, 16, 1024), blk + k > 0);
        }
    }
    wgmma_commit();
}

// Issues Õ (64 rows x value columns 256 c ..) += P~ ckv_j: P~ K-major from shared memory, the cache
// tile's blocks 4c .. 4c + 3 read MN-major (the keys are the K of this product): 64-column blocks
// KEYS * 128 bytes apart, 8-key groups 1024 (hopper.cuh). Four wgmmas of N = 256, one group.
__device__ __forceinline__ void issue_pv(float (&o)[128], const Smem &sm, int c, int st)
{
    wgmma_fence();
#pragma unroll
    for (int kc = 0; kc < KEYS / 16; kc++) {
        const uint64_t p = wgmma_desc_sw128(reinterpret_cast<const char *>(&sm.p[0][0]) + 32 * kc, 16, 1024);
        const uint64_t v = wgmma_desc_sw128(&sm.kv[st][4 * c][16 * kc][0], KEYS * 128, 1024);
        wgmma_m64n256k16_bf16<0, 1>(o, p, v, 1);
    }
    wgmma_commit();
}

// ---- the online softmax, shared by two warpgroups -----------------------------------------------------

// This thread's place in its warpgroup's accumulators (hopper.cuh): rows row[0] and row[1] = row[0] + 8,
// and in every 8-column block the columns 2 t4 and 2 t4 + 1.
struct Lane {
    int row[2], t4;
    int lim[2]; // keys before lim[rr] are the row's in this split (the causal mask and the chunk)
};

// First half of tile j's softmax: masks this thread's 16 scores (element e of block n: row
// row[e / 2], key key0 + 32 c + 8 n + 2 t4 + e % 2), scales them to base 2, and posts the maximum
// of this warpgroup's half of each row to shared memory; mx gets it.
__device__ __forceinline__ void post_half_max(float (&s)[16], float (&mx)[2], Smem &sm, const Lane &ln, int c,
                                              int key0, float scale_log2)
{
    mx[0] = mx[1] = -INFINITY;
#pragma unroll
    for (int n = 0; n < 4; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int key = key0 + HALF * c + 8 * n + 2 * ln.t4 + e % 2;
            const float x = key < ln.lim[e / 2] ? s[4 * n + e] * scale_log2 : -INFINITY;
            s[4 * n + e] = x;
            mx[e / 2] = fmaxf(mx[e / 2], x);
        }
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        mx[rr] = row_max<4>(mx[rr]);
        if (ln.t4 == 0)
            sm.row_part[c][ln.row[rr]] = mx[rr];
    }
}

// Second half, once both halves are posted: the row's new max m, P~ = 2^(S - m) written to sm.p in
// bf16 (the rounding point), l (this thread's part) adds the unrounded P~, Õ is rescaled. Ends at
// the barrier after which P~ is complete.
__device__ __forceinline__ void finish_softmax(const float (&s)[16], const float (&mx)[2], float (&o)[128],
                                               float (&m)[2], float (&l)[2], Smem &sm, const Lane &ln, int c)
{
    float shift[2], alpha[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        /* exercise: begin — the row's new max, agreed by both warpgroups: the running max, this warpgroup's half (mx) and the other's, posted in sm.row_part (check 17 --device cuda: y.npy of every case with more than 32 keys) | stub: const float m_new = fmaxf(m[rr], mx[rr]); */
        const float m_new = fmaxf(m[rr], fmaxf(mx[rr], sm.row_part[c ^ 1][ln.row[rr]]));
        /* exercise: end */
        shift[rr] = m_new == -INFINITY ? 0.0f : m_new; // no key yet: P~ = 0
        alpha[rr] = exp2f(m[rr] - shift[rr]);          // exp2(-inf) = 0 before the first key
        m[rr] = m_new;
    }
#pragma unroll
    for (int n = 0; n < 4; n++)
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            const float p0 = exp2f(s[4 * n + 2 * rr] - shift[rr]), p1 = exp2f(s[4 * n + 2 * rr + 1] - shift[rr]);
            sum[rr] += p0 + p1;
            const int col = HALF * c + 8 * n + 2 * ln.t4; // P~ rounded to bf16 here: the rounding point
            *reinterpret_cast<uint32_t *>(&sm.p[0][0] + swizzle<64>(ln.row[rr], col) + col % 8) = pack_bf16(p0, p1);
        }
#pragma unroll
    for (int rr = 0; rr < 2; rr++)
        l[rr] = l[rr] * alpha[rr] + sum[rr];
#pragma unroll
    for (int n = 0; n < VCOLS / 8; n++) {
        o[4 * n] *= alpha[0], o[4 * n + 1] *= alpha[0];
        o[4 * n + 2] *= alpha[1], o[4 * n + 3] *= alpha[1];
    }
    fence_proxy_async();                    // P~ is visible to wgmma ...
    named_barrier_sync(2, 128 * WARPGROUPS); // ... once both warpgroups have written their halves
}

// ---- the output ------------------------------------------------------------------------------------------

// O = Õ / l of this thread's rows and columns: o_lat in bf16 (one split) or O_s and lse_s.
__device__ void store_rows(const float (&o)[128], const float (&m)[2], const float (&total)[2], const LatentArgs &a,
                           const Item &it, const Lane &ln, int c)
{
    const size_t NH = (size_t)a.B * a.Tq * a.H;
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        if (ln.row[rr] >= it.rows)
            continue;
        const size_t row = (size_t)it.b * a.Tq * a.H + it.r0 + ln.row[rr];
        const float inv = total[rr] > 0.0f ? 1.0f / total[rr] : 0.0f; // a row this split gives no key: 0
#pragma unroll
        for (int n = 0; n < VCOLS / 8; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int col = VCOLS * c + 8 * n + 2 * ln.t4 + e;
                if (col >= a.m)
                    continue;
                const float x = o[4 * n + 2 * rr + e] * inv;
                if (a.splits == 1)
                    a.o_lat[row * a.m + col] = bf16_from_float(x);
                else
                    a.part_o[((size_t)blockIdx.y * NH + row) * a.m + col] = x;
            }
        if (a.splits > 1 && c == 0 && ln.t4 == 0) // natural log, as stage 11's partials
            a.part_lse[(size_t)blockIdx.y * NH + row] = total[rr] > 0.0f ? (m[rr] + log2f(total[rr])) * kLn2 : -INFINITY;
    }
    if (threadIdx.x == 0) {
        const unsigned long long per_row = a.splits == 1 ? 2ull * a.m : 4ull * (a.m + 1);
        hbm_dev_add(a.hbm, HBM_WRITTEN, (unsigned long long)it.rows * per_row);
    }
}

// ---- the kernel ------------------------------------------------------------------------------------------

__global__ void __launch_bounds__(NT, 1)
    latent_attention_kernel(const __grid_constant__ Maps maps, LatentArgs a)
{
    Smem &sm = aligned_smem<Smem>();
    const Item it = item_of(a);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4, c = threadIdx.x / 128;
    if (threadIdx.x == 0) {
        const uint32_t arrivals = a.tma ? 1 : 32; // TMA: the issuing thread; else the copying warp
        mbar_init(&sm.q_full, arrivals);
        for (int st = 0; st < STAGES; st++)
            mbar_init(&sm.kv_full[st], arrivals);
        fence_barrier_init();
    }
    __syncthreads();
    load_queries(sm, a, maps, it);
    for (int j = 0; j < STAGES && j < it.n_tiles; j++)
        load_tile(sm, a, maps, it, j);

    Lane ln;
    ln.t4 = lane % 4;
    for (int rr = 0; rr < 2; rr++) {
        ln.row[rr] = 16 * warp + lane / 4 + 8 * rr;
        const int r = it.r0 + ln.row[rr];
        ln.lim[rr] = ln.row[rr] < it.rows ? min(it.chunk.end, keys_seen(a.causal, r, a.H, a.Tq, a.Tk)) : it.chunk.end;
    }
    float s[16], o[128], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 128; i++)
        o[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; i++)
        s[i] = 0.0f;
    wgmma_fence_operand(o), wgmma_fence_operand(s); // the zeros are set before any wgmma is issued
    mbar_wait(&sm.q_full, 0); // (also with nothing to do: the copy must land before the block ends)
    if (it.n_tiles == 0) {    // a split that gives the rows no key: O_s = 0, lse_s = -inf, no wgmma
        const float none[2] = {0.0f, 0.0f};
        store_rows(o, m, none, a, it, ln, c);
        return;
    }
    // Tile j: S_j is in flight; wait for it, the softmax (the two warpgroups meet at its barriers),
    // P~_j ckv_j, and wait for that too. Then every warp is done with stage j % 2, and once all have
    // said so (a barrier) tile j + 2 streams into it while tile j + 1, loaded a whole tile ago, is
    // computed: the loads stay a tile ahead. (Issuing S_{j+1} behind P~_j ckv_j instead keeps the
    // tensor cores busier between the two, but then the stage of tile j + 1 is free only after
    // P~_{j-1} ckv_{j-1}, too late to load it before S_{j+1} needs it: measured slower.)
    auto tile = [&](int j) {
        wgmma_wait<0>();
        wgmma_fence_operand(s); // read only from here on
        float mx[2];
        post_half_max(s, mx, sm, ln, c, it.chunk.first + j * KEYS, a.scale_log2);
        named_barrier_sync(1, 128 * WARPGROUPS); // both halves of every row's max are posted
        finish_softmax(s, mx, o, m, l, sm, ln, c);
        issue_pv(o, sm, c, j % STAGES);
        wgmma_wait<0>();
        wgmma_fence_operand(o);
        named_barrier_sync(3, 128 * WARPGROUPS); // every warp's P~_j ckv_j is done: stage j % 2 is free
        if (j + STAGES < it.n_tiles)
            load_tile(sm, a, maps, it, j + STAGES);
    };
    // The last tile is taken out of the loop, and an empty split returned above, so that every path
    // into tile() has the same wgmmas in flight and no branch skips one: where the compiler cannot
    // tell which group a wait retires, it serializes every wgmma of the kernel (ptxas C7514/C7515).
    mbar_wait(&sm.kv_full[0], 0);
    issue_scores(s, sm, c, 0);
    for (int j = 0; j + 1 < it.n_tiles; j++) {
        tile(j);
        mbar_wait(&sm.kv_full[(j + 1) % STAGES], ((j + 1) / STAGES) & 1);
        issue_scores(s, sm, c, (j + 1) % STAGES); // S_{j+1}
    }
    tile(it.n_tiles - 1);
    // l: this thread's part, then the row's over the quad, then the two warpgroups' halves
    float total[2];
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        l[rr] = row_sum<4>(l[rr]);
        if (ln.t4 == 0)
            sm.row_part[c][ln.row[rr]] = l[rr];
    }
    named_barrier_sync(1, 128 * WARPGROUPS);
    for (int rr = 0; rr < 2; rr++)
        total[rr] = sm.row_part[0][ln.row[rr]] + sm.row_part[1][ln.row[rr]];
    store_rows(o, m, total, a, it, ln, c);
}

// ---- the split combine (stage 11's) -----------------------------------------------------------------

constexpr int MAX_SPLITS = 1024; // the combine's weights live in shared memory: --splits' top

// Row r of o_lat = bf16(sum_s exp(lse_s - lse) O_s), lse = log sum_s exp(lse_s): one block per row.
__global__ void combine_kernel(const float *part_o, const float *part_lse, uint16_t *o_lat, int NH, int m,
                               int splits, unsigned long long *hbm)
{
    __shared__ float weight[MAX_SPLITS];
    const int r = blockIdx.x;
    if (threadIdx.x == 0) {
        float top = -INFINITY, sum = 0.0f;
        for (int s = 0; s < splits; s++)
            top = fmaxf(top, part_lse[(size_t)s * NH + r]);
        for (int s = 0; s < splits; s++)
            sum += expf(part_lse[(size_t)s * NH + r] - top);
        const float total = top + logf(sum); // finite: every row sees a key in some split
        for (int s = 0; s < splits; s++)
            weight[s] = expf(part_lse[(size_t)s * NH + r] - total);
        hbm_dev_add(hbm, HBM_READ, (unsigned long long)splits * (m + 1) * sizeof(float));
        hbm_dev_add(hbm, HBM_WRITTEN, (unsigned long long)m * 2);
    }
    __syncthreads();
    for (int col = threadIdx.x; col < m; col += blockDim.x) {
        float x = 0.0f;
        for (int s = 0; s < splits; s++)
            x += weight[s] * part_o[((size_t)s * NH + r) * m + col];
        o_lat[(size_t)r * m + col] = bf16_from_float(x);
    }
}

// ---- the projections: cuBLAS in bf16 ----------------------------------------------------------------

// RoPE on q_pe (B Tq H rows of p floats, c_q W_qr as cuBLAS left it in float32), rounded to bf16 once:
// row t H + h of token t = b Tq + i turns by position Tk - Tq + i.
__global__ void rope_to_bf16_kernel(const float *q_pe32, uint16_t *q_pe, long long rows, int H, int Tq, int Tk, int p,
                                    float theta, unsigned long long *hbm)
{
    const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows)
        return;
    float x[64]; // p <= 64
    for (int t = 0; t < p; t++)
        x[t] = q_pe32[row * p + t];
    rope_rotate(x, p, row_position((int)(row % ((long long)Tq * H)), H, Tq, Tk), theta);
    for (int t = 0; t < p; t++)
        q_pe[row * p + t] = bf16_from_float(x[t]);
    hbm_dev_add(hbm, HBM_READ, (unsigned long long)p * sizeof(float));
    hbm_dev_add(hbm, HBM_WRITTEN, (unsigned long long)p * 2);
}

// C = op(A) op(B) for `batch` products (M, N, K), bf16 operands, C bf16 (or float32: c_f32), counted
// at 2 bytes an element (4 for a float32 C).
int gemm_counted(cublasHandle_t hd, int M, int N, int K, RmOperand A, RmOperand B, void *C, int c_f32, int ldc,
                 long long strideC, int batch, unsigned long long *hbm, const char *what, FlError *err)
{
    int rc = fl_gemm_rm_bf16(hd, M, N, K, A, B, C, c_f32, ldc, strideC, batch, what, err);
    const unsigned long long nb = (unsigned long long)batch;
    if (rc == FL_OK)
        rc = hbm_dev_add_from_host(hbm, 2 * nb * ((unsigned long long)M * K + (unsigned long long)K * N),
                                   (c_f32 ? 4 : 2) * nb * M * N, err);
    return rc;
}

RmOperand plain(const void *ptr, int ld) { return RmOperand{ptr, ld, 0, 0}; }

// --splits, or the heuristic filling the SMs once (a block per SM); never more splits than keys.
int split_plan(const MlaProblem *p, const RunCtx *ctx)
{
    int device = 0, sms = 132;
    if (cudaGetDevice(&device) == cudaSuccess)
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    const long items = (long)p->B * ceil_div(p->Tq * p->H, ROWS);
    const int splits = ctx->splits > 0 ? ctx->splits : split_count(items, sms, p->Tk, TCM_MIN_SPLIT_KEYS);
    return splits > p->Tk ? p->Tk : splits;
}

int latent_attention(const MlaProblem *p, const DeviceBuffers &w, int splits, unsigned long long *hbm, FlError *err)
{
    LatentArgs a;
    a.q_lat = w.q_lat, a.q_pe = w.q_pe, a.ckv = p->in_bf16[MLA_CKV], a.kpe = p->in_bf16[MLA_KPE];
    a.o_lat = w.o_lat, a.part_o = w.part_o, a.part_lse = w.part_lse;
    a.B = p->B, a.Tq = p->Tq, a.Tk = p->Tk, a.H = p->H, a.m = p->m, a.p = p->p, a.causal = p->causal;
    a.splits = splits, a.tma = p->m == 64 * LAT_BLOCKS && p->p == 64;
    a.scale_log2 = p->scale * kLog2e, a.hbm = hbm;
    const int R = p->Tq * p->H;
    Maps maps;
    memset(&maps, 0, sizeof maps);
    int rc = FL_OK;
    if (a.tma) { // boxes of 64 rows x 64 columns, one sequence at a time (rows past its end read as 0)
        rc = tma_map_bf16(&maps.q_lat, a.q_lat, p->B, R, p->m, ROWS, 64, err, TMA_SWIZZLE_128B);
        if (rc == FL_OK)
            rc = tma_map_bf16(&maps.q_pe, a.q_pe, p->B, R, p->p, ROWS, 64, err, TMA_SWIZZLE_128B);
        if (rc == FL_OK)
            rc = tma_map_bf16(&maps.ckv, a.ckv, p->B, p->Tk, p->m, KEYS, 64, err, TMA_SWIZZLE_128B);
        if (rc == FL_OK)
            rc = tma_map_bf16(&maps.kpe, a.kpe, p->B, p->Tk, p->p, KEYS, 64, err, TMA_SWIZZLE_128B);
    }
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaFuncSetAttribute(latent_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 (int)SMEM_BYTES),
                            "latent attention: raising the shared-memory limit", err);
    if (rc != FL_OK)
        return rc;
    const dim3 grid((unsigned)ceil_div(R, ROWS), (unsigned)splits, (unsigned)p->B);
    latent_attention_kernel<<<grid, NT, SMEM_BYTES>>>(maps, a);
    rc = fl_cuda_launch_status("latent_attention_kernel", err);
    if (rc == FL_OK && splits > 1) {
        const int NH = p->B * R;
        combine_kernel<<<(unsigned)NH, 128>>>(w.part_o, w.part_lse, w.o_lat, NH, p->m, splits, hbm);
        rc = fl_cuda_launch_status("combine_kernel", err);
    }
    return rc;
}

size_t tc_mla_workspace_bytes(const MlaProblem *p, const RunCtx *ctx)
{
    return device_buffers(p, split_plan(p, ctx), NULL, NULL);
}

int tc_mla_forward(const MlaProblem *p, float *y, RunCtx *ctx, FlError *err)
{
    for (int id = 0; id < MLA_INPUT_COUNT; id++)
        if (!p->in_bf16[id])
            return fl_fail(err, FL_BAD_INPUT, "stage 17 (CUDA): no bf16 copy of %s (the runner makes them)",
                           mla_file_name(id));
    if (p->m > 64 * LAT_BLOCKS || p->p > 64)
        return fl_fail(err, FL_BAD_INPUT, "stage 17 latent attention kernel: m = %d, p = %d; it supports m <= %d and p <= 64",
                       p->m, p->p, 64 * LAT_BLOCKS);
    if (split_plan(p, ctx) > MAX_SPLITS)
        return fl_fail(err, FL_BAD_INPUT, "stage 17: %d splits; its combine takes at most %d", split_plan(p, ctx),
                       MAX_SPLITS);
    cublasHandle_t hd;
    int rc = fl_cublas_handle(&hd, err);
    if (rc != FL_OK)
        return rc;
    const int splits = split_plan(p, ctx);
    DeviceBuffers w;
    device_buffers(p, splits, ctx->workspace, &w);
    unsigned long long *hbm = ctx->hbm_dev;
    const uint16_t *const *in = p->in_bf16;
    const int N = p->B * p->Tq, H = p->H, m = p->m, dh = p->dh, dv = p->dv;
    // c_q = x W_dq;  q_nope = c_q W_uq;  q_pe = RoPE(c_q W_qr): token-major (N, H, .), bf16
    rc = gemm_counted(hd, N, p->mq, p->D, plain(in[MLA_X], p->D), plain(in[MLA_W_DQ], p->mq), w.c_q, 0, p->mq, 0, 1,
                      hbm, "c_q = x W_dq", err);
    if (rc == FL_OK)
        rc = gemm_counted(hd, N, H * dh, p->mq, plain(w.c_q, p->mq), plain(in[MLA_W_UQ], H * dh), w.q_nope, 0, H * dh,
                          0, 1, hbm, "q_nope = c_q W_uq", err);
    if (rc == FL_OK)
        rc = gemm_counted(hd, N, H * p->p, p->mq, plain(w.c_q, p->mq), plain(in[MLA_W_QR], H * p->p), w.q_pe32, 1,
                          H * p->p, 0, 1, hbm, "q_pe = c_q W_qr", err);
    if (rc == FL_OK) {
        const long long rows = (long long)N * H;
        rope_to_bf16_kernel<<<(unsigned)((rows + 127) / 128), 128>>>(w.q_pe32, w.q_pe, rows, H, p->Tq, p->Tk, p->p,
                                                                    p->rope_theta, hbm);
        rc = fl_cuda_launch_status("rope_to_bf16_kernel", err);
    }
    // q_lat_h = q_nope_h W_uk_h^T for every head h: a batch of H products, (N, dh) (dh, m)
    if (rc == FL_OK)
        rc = gemm_counted(hd, N, m, dh, RmOperand{w.q_nope, H * dh, dh, 0}, RmOperand{in[MLA_W_UK], H * dh, dh, 1},
                          w.q_lat, 0, H * m, m, H, hbm, "q_lat = q_nope W_uk^T", err);
    if (rc == FL_OK)
        rc = latent_attention(p, w, splits, hbm, err);
    // o_h = o_lat_h W_uv_h: a batch of H products, (N, m) (m, dv); then y = o W_o in float32
    if (rc == FL_OK)
        rc = gemm_counted(hd, N, dv, m, RmOperand{w.o_lat, H * m, m, 0}, RmOperand{in[MLA_W_UV], H * dv, dv, 0}, w.o,
                          0, H * dv, dv, H, hbm, "o = o_lat W_uv", err);
    if (rc == FL_OK)
        rc = gemm_counted(hd, N, p->D, H * dv, plain(w.o, H * dv), plain(in[MLA_W_O], p->D), y, 1, p->D, 0, 1, hbm,
                          "y = o W_o", err);
    return rc;
}

} // namespace

static const MlaEntry tc_mla_entry = {"mla", tc_mla_forward, tc_mla_workspace_bytes};

static const StageImpl tc_mla_cuda = {
    .stage = "17", .name = "tc_mla", .variant = "", .device = DEVICE_CUDA,
    .lesson = "stage 09's absorbed MLA step in bf16: cuBLAS bf16 projections, the latent attention on wgmma (sm_90a)",
    .kind_entry = &tc_mla_entry, .precision = PRECISION_BF16,
};

extern "C" const StageImpl *const stage17_tc_mla_cuda[] = {&tc_mla_cuda, NULL};
