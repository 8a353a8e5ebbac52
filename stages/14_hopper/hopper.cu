/* stages/14_hopper/hopper.cu — FlashAttention on Hopper (sm_90a): bf16 inputs, float32 accumulation,
 * causal and GQA, head dims 64 and 128. Its parent is stage 12 (`flashlab diff 12 14`).
 *
 * New in stage 14, the forward pass. Stage 12 runs on any GPU since Ampere: every warp loads its own
 * operands (cp.async, ldmatrix) and multiplies 16 x 8 tiles with mma.sync. Hopper adds machinery that
 * takes both jobs off the warps (common/hopper.cuh holds it, once):
 *   - TMA: one thread asks the copy engine for a whole tile; the bytes land in shared memory and
 *     are counted on an mbarrier, which the threads that need them wait on;
 *   - wgmma: the four warps of a warpgroup multiply a 64-row tile together, reading both operands
 *     straight from shared memory (or A from registers), asynchronously;
 *   - warp specialization: one warpgroup only copies (the producer), two or three only compute (the
 *     consumers), handing K/V stages back and forth on mbarriers; setmaxnreg moves registers from
 *     the producer, which needs few, to the consumers, which hold the accumulators.
 * The algorithm is stage 12's: the same online softmax in base 2, the same rounding of P to bf16,
 * with the forward's key tiles of 128 (one wgmma N) where stage 12 walks 64, and blocks of 192
 * query rows (forward) and 192 keys (backward) at d = 64; the CPU reference (reference.c) is stage
 * 12's walking the same tiles (tiles.h).
 * The backward pass is new too: the same producer/consumer split, with the keys in wgmma's M.
 *
 * The runner hands the stage bf16 copies of q, k, v, dO (AttnProblem.q_bf16 ...; made outside the
 * timed region); o, lse and the gradients are written in float32.
 *
 * Rounding happens at four places, the same ones stage 12's CPU reference (reference.c) uses:
 * the inputs, P before P V, P before dV = P^T dO, and dS before dK = dS^T Q and dQ = dS K. */
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include <initializer_list>

#include "attn.h"
#include "cuda_util.h"
#include "error.h"
#include "hopper.cuh"
#include "mma.cuh"
#include "tiles.h"

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// The kernels' arguments, passed by value. Keep them within 128 bytes: with two ints more (136
// bytes) nvcc 13.0 compiled the forward differently (its softmax no longer split into a masked and an
// unmasked loop; 4128 -> 3728 SASS instructions at d = 64), which was 46 % slower at d = 64 in one
// H200 run (README, "The persistent grid"). The static_assert below holds the line.
struct TcArgs {
    const bf16 *q, *k, *v, *dO;  // bf16 inputs (B, Hq|Hkv, T, D)
    float *o, *lse;              // forward outputs; read back by the backward
    float *dQ, *dK, *dV, *D;     // gradients; D = rowsum(dO ∘ O) in the workspace
    int Tq, Tk, Hq, group;       // group = Hq / Hkv
    int causal;                  // bottom-right aligned: row i sees keys j <= i + Tk - Tq
    float scale, scale_log2;     // scale * log2(e): scores live in base 2
    int deal;                    // the forward deals out the query tiles of this many heads together
    unsigned long long *hbm;     // [read, written] or NULL
    int *next_tile;              // the forward's work counter (zeroed before the launch), or NULL
                                 // for a grid of a block per query tile
};
static_assert(sizeof(TcArgs) <= 128, "TcArgs grew past 128 bytes: see the comment above it");

// Key j is hidden from query row i (causal, or a key/row past the end of a short tile).
__device__ __forceinline__ bool hidden(const TcArgs &a, int i, int j)
{
    return i >= a.Tq || j >= tc_keys_seen(a.causal, a.Tq, a.Tk, i);
}

// ==== the forward pass, on Hopper =================================================================
//
// A thread block takes query tiles Q_i (of any head) one after the other (FwdWork): many on the
// stage's persistent grid of a block per SM, or one when the grid has a block per tile (variant
// "per-tile"). BR = 128 rows and three warpgroups (384 threads) at d = 128,
// BR = 192 rows and four warpgroups (512 threads) at d = 64 (FwdTile says why).
// The warpgroups do different jobs ("warp specialization"):
//   warpgroup 0, the producer: gives most of its registers back (setmaxnreg) and one of its threads
//     issues every copy with TMA: Q_i once per query tile, then K_j and V_j into a ring of NSTAGE
//     shared-memory stages, as far ahead as the ring allows;
//   warpgroups 1, 2 (and 3), the consumers: take more registers; each owns 64 rows of Q_i and walks the
//     K/V tiles: S = Q_i K_j^T (64, BC) by wgmma straight from shared memory, the online softmax in
//     registers (stage 12's, line for line), then O += P V_j (64, D) by wgmma with P in registers.
// A stage changes hands on two mbarriers (common/hopper.cuh):
//   kv_full[s]   the producer announces the bytes of K_j and V_j; TMA counts them down as they land;
//                the consumers wait on it;
//   kv_empty[s]  each consumer warp (8 or 12) arrives when its wgmmas have finished reading stage s;
//                the producer waits on it before it reuses s for tile j + NSTAGE.
// Q_i changes hands the same way, on q_full and q_empty: the consumers give it back when their
// last S = Q_i K_j^T is done, and the producer loads the next query tile's Q while they finish.
// Shared memory holds every tile in the 128-byte swizzled layout (hopper.cuh): blocks of 64 columns,
// each filled by one TMA box with rows of 128 bytes (whole L2 lines) and read by wgmma through a
// swizzled descriptor without bank conflicts. The query tile is stage 12's at d = 128, the key
// tile twice as wide (tiles.h: BC = 128 keys, one wgmma N); reference.c walks the same tiles, so P
// is rounded to bf16 after the same running maxima there.
template <int D> struct FwdTile {
    static constexpr int ROWS = 64; // query rows of one consumer warpgroup (one wgmma M)
    // Consumer warpgroups: two at d = 128; three at d = 64, where a round of a warpgroup is half as
    // long, so a third warpgroup's rounds help hide each one's softmax and its waits, and each K/V
    // tile serves 192 query rows instead of 128
    static constexpr int CONSUMERS = TC_FWD_BLOCK_R(D) / ROWS, NT = 128 * (1 + CONSUMERS);
    static constexpr int BR = TC_FWD_BLOCK_R(D), BC = TC_FWD_BLOCK_C;
    // K/V stages in the ring: a consumer holds two at a time (P_{j-1} V_{j-1} runs while S_j is
    // computed), so the producer needs more than two to stay a tile ahead; at d = 128 three of
    // 64 KiB each and Q_i fill 224 of the 227 KiB of shared memory a block may have
    static constexpr int NSTAGE = D == 64 ? 4 : 3;
    static constexpr int CBLK = D / 64, NO = D / 8; // 64-column blocks of a tile; 8-column blocks of O
    // Registers per thread after setmaxnreg, within the block's pool (regs_fit, common/hopper.cuh)
    static constexpr int PRODUCER_REGS = 24, CONSUMER_REGS = CONSUMERS == 3 ? 160 : 240;
    static_assert(regs_fit(CONSUMERS, PRODUCER_REGS, CONSUMER_REGS), "more registers than the block has");
};

template <int D> struct FwdSmem {
    using T = FwdTile<D>;
    alignas(1024) bf16 q[T::CONSUMERS][T::CBLK][T::ROWS][64]; // Q_i: 64 rows per consumer
    alignas(1024) bf16 k[T::NSTAGE][T::CBLK][T::BC][64];      // K_j, one per stage
    alignas(1024) bf16 v[T::NSTAGE][T::CBLK][T::BC][64];      // V_j, one per stage
    uint64_t q_full, q_empty, kv_full[T::NSTAGE], kv_empty[T::NSTAGE];
    int tile; // the query tile Q_i now in q (a work index; >= the number of tiles: no more work)
    static constexpr size_t BYTES = sizeof(FwdSmem) + 1024; // + room to align the base to 1024 bytes
};

// A block's work: query tiles, BR rows of one head each. Tile k of a head is counted from its last
// rows (with a causal mask the last rows walk the most keys) and cut from the head's last row back
// (tiles.h: TC_FWD_BLOCK_END), so a short tile is the first rows; its rows before row 0 are zeros
// from TMA, computed by no warpgroup that has only them and written nowhere. The tiles are dealt
// out a few heads at a time (a.deal, tc_args): tile 0 of each head of the deal, then tile 1 of
// each, and so on, then the next deal's heads. So the blocks running at one time share the K and V
// of the deal's heads in L2, and with the mask the heaviest tiles go first everywhere, and not
// only within each head, where the last head's heaviest tiles would start near the end of the
// launch and run on alone. Without the mask every tile has the same work: deal = 1, head after head.
// A block starts with tile blockIdx.x and then takes the next one from a counter (the workspace's
// int, zeroed before the launch) until none are left. With a grid smaller than the tiles (persistent: a block
// per SM) the producer loads the next tile's Q_i and K/V while the consumers finish the last one,
// where a block per tile waits for its own first copies.
struct FwdWork {
    int bh, q0, n_tiles; // head (b, h) flattened, first row (< 0 for a short first tile), K/V tiles it walks
};

// Work index `tile` of the n_work query tiles of the launch (per_head of each of B Hq heads).
template <int D> __device__ __forceinline__ FwdWork fwd_work(const TcArgs &a, int tile, int n_work)
{
    constexpr int BR = FwdTile<D>::BR;
    const int per_head = ceil_div(a.Tq, BR), heads = n_work / per_head;
    const int h0 = tile / (per_head * a.deal) * a.deal, n = min(a.deal, heads - h0); // the deal's heads
    const int at = tile - h0 * per_head;                   // the tile's place in its deal
    const int end = TC_FWD_BLOCK_END(a.Tq, D, at / n);      // one past the tile's last row
    // Keys the tile needs: all of them, or (causal) up to the last row's position.
    return {h0 + at % n, end - BR, ceil_div(tc_keys_seen(a.causal, a.Tq, a.Tk, end - 1), TC_FWD_BLOCK_C)};
}

// The producer's thread, for one query tile: Q_i's 64-row parts, then K_j and V_j of every key tile,
// each as D / 64 boxes of 64 columns. Tensor maps view q as B * Hq matrices of Tq rows and k, v as
// B * Hkv matrices of Tk rows, so a box past a head's last row is zero-filled, never the next head's
// rows. `it` counts the K/V tiles the block loaded before this one: the ring goes on from there.
template <int D>
__device__ void produce(FwdSmem<D> &sm, const CUtensorMap *mq, const CUtensorMap *mk, const CUtensorMap *mv,
                        const TcArgs &a, int bh, int kvh, int q0, int n_tiles, unsigned it)
{
    using T = FwdTile<D>;
    mbar_arrive_expect_tx(&sm.q_full, sizeof sm.q);
    for (int c = 0; c < T::CONSUMERS; c++)
        for (int cb = 0; cb < T::CBLK; cb++)
            tma_load_3d(&sm.q[c][cb][0][0], mq, 64 * cb, q0 + T::ROWS * c, bh, &sm.q_full);
    hbm_dev_add(a.hbm, HBM_READ, (unsigned long long)(q0 + T::BR - max(q0, 0)) * D * sizeof(bf16)); // rows >= 0
    for (int j = 0; j < n_tiles; j++) {
        const unsigned st = (it + j) % T::NSTAGE, use = (it + j) / T::NSTAGE;
        if (use > 0) // the consumers' previous use of this stage (phase use - 1) must be over
            mbar_wait(&sm.kv_empty[st], (use - 1) & 1);
        mbar_arrive_expect_tx(&sm.kv_full[st], sizeof sm.k[0] + sizeof sm.v[0]);
        /* exercise: begin — the hand-off, producer side: the boxes of K_j and V_j that fill stage st (column block cb of the tile's BC rows of kv head kvh), delivered to kv_full[st] (check 14 --device cuda: o of the cases longer than one 128-key tile) | stub: for (int cb = 0; cb < T::CBLK; cb++) { tma_load_3d(&sm.k[st][cb][0][0], mk, 64 * cb, 0, kvh, &sm.kv_full[st]); tma_load_3d(&sm.v[st][cb][0][0], mv, 64 * cb, 0, kvh, &sm.kv_full[st]); } */
        for (int cb = 0; cb < T::CBLK; cb++) {
            tma_load_3d(&sm.k[st][cb][0][0], mk, 64 * cb, j * T::BC, kvh, &sm.kv_full[st]);
            tma_load_3d(&sm.v[st][cb][0][0], mv, 64 * cb, j * T::BC, kvh, &sm.kv_full[st]);
        }
        /* exercise: end */
        hbm_dev_add(a.hbm, HBM_READ, (unsigned long long)min(T::BC, a.Tk - j * T::BC) * 2 * D * sizeof(bf16));
    }
}

// One consumer's view of a K/V tile's work, in the order the pipeline below uses it. Each thread holds,
// as wgmma's accumulator layout says (hopper.cuh), rows r[0] = q0 + 16 warp + g and r[1] = r[0] + 8
// of S (s[n]: keys 8n + 2 t4, + 1) and of Õ (o[n]: columns 8n + 2 t4, + 1): the layout of stage
// 12's mma.sync fragments, so the softmax and the epilogue read as stage 12's.
struct Rows {
    int q0, r[2], t4; // first row of the warpgroup; this thread's two rows; its column pair
};

// A consumer warpgroup's rows q0 .. q0 + 63 as this thread holds them (warp, g = lane / 4), how
// many of them lie in 0 .. Tq - 1, and its own K/V tiles of bc keys: with the mask, up to its last
// row's last key (another warpgroup's rows may reach one tile further; it only hands those back).
struct WarpgroupRows {
    Rows w;
    int rows, own_tiles;
};

__device__ __forceinline__ WarpgroupRows warpgroup_rows(const TcArgs &a, int q0, int warp, int lane, int bc)
{
    const int g = lane / 4;
    WarpgroupRows x;
    x.w = {q0, {q0 + 16 * warp + g, q0 + 16 * warp + g + 8}, lane % 4};
    const int row_end = min(q0 + 64, a.Tq);
    x.rows = row_end - max(q0, 0);
    const int key_end = x.rows > 0 ? tc_keys_seen(a.causal, a.Tq, a.Tk, row_end - 1) : 0;
    x.own_tiles = ceil_div(key_end, bc);
    return x;
}

// Issues S = Q_i K_j^T (64, BC) for stage st: D / 16 wgmmas of N = BC = 128, both operands K-major
// in shared memory, as one commit group. Nothing waits here.
template <int D>
__device__ __forceinline__ void issue_scores(float (&s)[TC_FWD_BLOCK_C / 8][4], const FwdSmem<D> &sm, int c, int st)
{
    using T = FwdTile<D>;
#pragma unroll
    for (int n = 0; n < T::BC / 8; n++)
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
    wgmma_fence();
#pragma unroll
    for (int k16 = 0; k16 < D / 16; k16++) { // columns 16 k16 ..: block k16 / 4, 32 (k16 % 4) bytes in
        const int cb = k16 / 4, at = 32 * (k16 % 4);
        wgmma_m64n128k16_bf16(&s[0][0], wgmma_desc_sw128(reinterpret_cast<const char *>(&sm.q[c][cb][0][0]) + at, 16, 1024),
                              wgmma_desc_sw128(reinterpret_cast<const char *>(&sm.k[st][cb][0][0]) + at, 16, 1024),
                              k16 > 0);
    }
    wgmma_commit();
}

// Issues O += P V_j (64, D) for stage st, P as bf16 A fragments in registers, V_j read MN-major
// (its columns contiguous): BC / 16 wgmmas of N = D; one commit group. pa and o must not change
// until it has completed.
template <int D>
__device__ __forceinline__ void issue_pv(float (&o)[D / 8][4], const uint32_t (&pa)[TC_FWD_BLOCK_C / 16][4],
                                         const FwdSmem<D> &sm, int st)
{
    using T = FwdTile<D>;
    wgmma_fence();
#pragma unroll
    for (int kc = 0; kc < T::BC / 16; kc++) { // keys 16 kc .. 16 kc + 15
        // MN-major: 64-column blocks BC * 128 bytes apart (leading), 8-key groups 1024 (stride)
        const uint64_t v = wgmma_desc_sw128(&sm.v[st][0][16 * kc][0], T::BC * 128, 1024);
        if constexpr (D == 128)
            wgmma_m64n128k16_bf16_rs(&o[0][0], pa[kc], v, 1);
        else
            wgmma_m64n64k16_bf16_rs(&o[0][0], pa[kc], v, 1);
    }
    wgmma_commit();
}

// The online softmax of tile kv0 in base 2 over this thread's two rows (element e of s[n]: row
// r[e / 2], key kv0 + 8n + 2 t4 + e % 2): S becomes P~ = exp2(S scale log2(e) - m_new) in place,
// m and l are updated, and alpha[rr] = exp2(m_old - m_new) is what Õ must be scaled by. The
// scale is folded into the exponent (one FFMA per score instead of a multiply and a subtract; the
// maximum of the raw scores is taken first, which the positive scale does not change). Only tiles
// that reach past a row's last key are masked.
//
// Latency, not arithmetic, is what a consumer warp waits on here (Nsight Compute's largest stall is
// "wait", a fixed-latency dependency): a running maximum or sum over a row's BC / 4 scores is a
// chain of that many dependent instructions. So each row keeps CHAINS independent partial maxima and
// sums, combined at the end, and both rows go through the same loops.
constexpr int CHAINS = 4; // the partial maxima and sums are combined as a tree of two levels below

__device__ __forceinline__ void softmax_tile(float (&s)[TC_FWD_BLOCK_C / 8][4], float (&m)[2], float (&l)[2],
                                             float (&alpha)[2], const TcArgs &a, const Rows &w, int kv0)
{
    constexpr int BC = TC_FWD_BLOCK_C;
    const bool masked = kv0 + BC > a.Tk || (a.causal && kv0 + BC - 1 > w.q0 + a.Tk - a.Tq);
    float part[2][CHAINS]; // partial maxima, then partial sums, of each row
#pragma unroll
    for (int rr = 0; rr < 2; rr++)
#pragma unroll
        for (int c = 0; c < CHAINS; c++)
            part[rr][c] = -INFINITY;
#pragma unroll
    for (int n = 0; n < BC / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) { // e / 2: the row, e % 2: the key
            if (masked && hidden(a, w.r[e / 2], kv0 + 8 * n + 2 * w.t4 + e % 2))
                s[n][e] = -INFINITY;
            part[e / 2][n % CHAINS] = fmaxf(part[e / 2][n % CHAINS], s[n][e]);
        }
    float m_use[2];
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        const float mx = fmaxf(fmaxf(part[rr][0], part[rr][1]), fmaxf(part[rr][2], part[rr][3]));
        const float m_new = fmaxf(m[rr], row_max<4>(mx) * a.scale_log2);
        m_use[rr] = m_new == -INFINITY ? 0.0f : m_new; // a row with no key yet: P = 0
        alpha[rr] = fast_exp2(m[rr] - m_use[rr]);
        m[rr] = m_new;
#pragma unroll
        for (int c = 0; c < CHAINS; c++)
            part[rr][c] = 0.0f;
    }
#pragma unroll
    for (int n = 0; n < BC / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float p = fast_exp2(fmaf(s[n][e], a.scale_log2, -m_use[e / 2]));
            s[n][e] = p;
            part[e / 2][n % CHAINS] += p;
        }
#pragma unroll
    for (int rr = 0; rr < 2; rr++) // P summed in float32, before rounding
        l[rr] = l[rr] * alpha[rr] + ((part[rr][0] + part[rr][1]) + (part[rr][2] + part[rr][3]));
}

// Õ *= alpha, row by row.
template <int NO> __device__ __forceinline__ void rescale(float (&o)[NO][4], const float (&alpha)[2])
{
#pragma unroll
    for (int n = 0; n < NO; n++) {
        o[n][0] *= alpha[0], o[n][1] *= alpha[0];
        o[n][2] *= alpha[1], o[n][3] *= alpha[1];
    }
}

// P~ (float32, in the S accumulators) as the bf16 A fragments of P V: the rounding point.
__device__ __forceinline__ void p_fragments(uint32_t (&pa)[TC_FWD_BLOCK_C / 16][4], const float (&s)[TC_FWD_BLOCK_C / 8][4])
{
#pragma unroll
    for (int kc = 0; kc < TC_FWD_BLOCK_C / 16; kc++)
        a_from_c(pa[kc], s[2 * kc], s[2 * kc + 1]);
}

// Hands stage st back to the producer: every warp arrives once, after its wgmmas reading st are done.
__device__ __forceinline__ void release(uint64_t *kv_empty, int lane)
{
    __syncwarp();
    if (lane == 0)
        mbar_arrive(kv_empty);
}

// The consumer warpgroups take turns at the tensor cores ("ping-pong"), in a ring 0 -> 1 (-> 2) -> 0:
// warpgroup c waits on named barrier TURN + c until the one before it has issued its matrix
// products, issues its own, and lets the next one go. So the softmax of one warpgroup runs while
// the others' products keep the tensor cores busy. All must pass the turn equally often, so each goes
// round n_tiles + 1 times per query tile (a key tile that a warpgroup's rows do not reach gives it
// an empty round); the ring runs on from one query tile to the next. The rounds are written out as
// prologue, steady state and drain, with no branch around a wgmma inside the loop: ptxas
// serialises wgmmas that sit in divergent-looking paths.
constexpr int TURN = 1; // named barriers 1 .. CONSUMERS (0 is __syncthreads)

// Which of the two ways of hiding the softmax a forward kernel uses. The stage uses both; the
// variants "no-pingpong", "no-overlap" and "serial" leave one or both out, so that `flashlab bench`
// measures what each buys (README, "What each piece buys"). Without ping-pong the turns are no-ops;
// without the overlap a consumer waits for P_{j-1} V_{j-1} too before tile j's softmax.
enum Hide : int { HIDE_NONE = 0, HIDE_IN_WARPGROUP = 1, HIDE_PINGPONG = 2, HIDE_BOTH = 3 };

template <int HIDE, int CONSUMERS> struct Turns {
    static __device__ __forceinline__ void wait(int c)
    {
        if constexpr ((HIDE & HIDE_PINGPONG) != 0)
            named_barrier_sync(TURN + c, 256); // this warpgroup and the one passing to it
    }
    static __device__ __forceinline__ void pass(int c)
    {
        if constexpr ((HIDE & HIDE_PINGPONG) != 0)
            named_barrier_arrive(TURN + (c + 1) % CONSUMERS, 256);
    }
};

// A consumer warpgroup's epilogue: O = Õ / l, lse = (m + log2 l) ln 2 for its rows of head bh that
// lie in 0 .. Tq - 1 (`rows` of them); a row that saw no key: o = 0, lse = -inf.
template <int D>
__device__ __forceinline__ void store_rows(const TcArgs &a, const float (&o)[D / 8][4], const float (&m)[2],
                                           const float (&l)[2], const Rows &w, int bh, int rows, int tid)
{
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        const float lsum = row_sum<4>(l[rr]);
        if (w.r[rr] < 0 || w.r[rr] >= a.Tq) // a row of a short first tile, or past the head's last
            continue;
        const float inv = lsum != 0.0f ? 1.0f / lsum : 0.0f; // a NaN l is not an empty row
        float *orow = a.o + ((size_t)bh * a.Tq + w.r[rr]) * D;
#pragma unroll
        for (int n = 0; n < D / 8; n++)
            *reinterpret_cast<float2 *>(orow + 8 * n + 2 * w.t4) =
                make_float2(o[n][2 * rr] * inv, o[n][2 * rr + 1] * inv);
        if (w.t4 == 0)
            a.lse[(size_t)bh * a.Tq + w.r[rr]] = lsum != 0.0f ? (m[rr] + log2f(lsum)) * kLn2 : -INFINITY;
    }
    if (tid == 0 && rows > 0)
        hbm_dev_add(a.hbm, HBM_WRITTEN, (unsigned long long)rows * (D + 1) * sizeof(float));
}

// One consumer warpgroup, one query tile: rows q0 .. q0 + 63 of the head (q0 = the tile's first
// row + 64 c), the tile's K/V tiles from ring position `it` on.
// Round j is software-pipelined inside the warpgroup too: it issues S_j = Q K_j^T and then
// O += P_{j-1} V_{j-1}, waits for S_j only, and runs tile j's softmax on the CUDA cores while the
// tensor cores still work on P_{j-1} V_{j-1}. Then it waits for that, hands stage j - 1 back,
// rescales Õ by tile j's alpha and rounds P_j for the next round.
template <int D, int HIDE>
__device__ void consume(FwdSmem<D> &sm, const TcArgs &a, int c, int bh, int q0, int n_tiles, unsigned it)
{
    using T = FwdTile<D>;
    using Turn = Turns<HIDE, T::CONSUMERS>;
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
    const WarpgroupRows mine = warpgroup_rows(a, q0, warp, lane, T::BC);
    const Rows w = mine.w;
    const int rows = mine.rows, own_tiles = mine.own_tiles;
    const auto stage_of = [it](int j) { return (it + j) % T::NSTAGE; };
    const auto phase_of = [it](int j) { return (uint32_t)((it + j) / T::NSTAGE) & 1; };

    float o[T::NO][4]; // Õ, unnormalised
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2] = {1.0f, 1.0f};
#pragma unroll
    for (int n = 0; n < T::NO; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float s[T::BC / 8][4];
    uint32_t pa[T::BC / 16][4]; // P_{r-1}, read by the P V in flight

    if (own_tiles > 0) { // round 0: S_0, its softmax, P_0
        Turn::wait(c);
        mbar_wait(&sm.kv_full[stage_of(0)], phase_of(0));
        issue_scores<D>(s, sm, c, stage_of(0));
        Turn::pass(c);
        wgmma_wait<0>();
        softmax_tile(s, m, l, alpha, a, w, 0);
        p_fragments(pa, s);
    }
    for (int j = 1; j < own_tiles; j++) { // round j: S_j and P_{j-1} V_{j-1} in flight together
        Turn::wait(c);
        mbar_wait(&sm.kv_full[stage_of(j)], phase_of(j)); // K_j, V_j have landed
        issue_scores<D>(s, sm, c, stage_of(j));
        issue_pv<D>(o, pa, sm, stage_of(j - 1));
        Turn::pass(c);
        if constexpr ((HIDE & HIDE_IN_WARPGROUP) == 0)
            wgmma_wait<0>(); // the ablation without the overlap: P_{j-1} V_{j-1} first, then the softmax
        /* exercise: begin — the overlap: wait for S_j alone, run tile j's softmax while P_{j-1} V_{j-1} still runs, then wait for it, hand stage j - 1 back and only then rescale Õ (the product adds into it) and round P_j (check 14 --device cuda: o of the cases longer than one 128-key tile) | stub: wgmma_wait<0>(); softmax_tile(s, m, l, alpha, a, w, j * T::BC); release(&sm.kv_empty[stage_of(j - 1)], lane); p_fragments(pa, s); */
        wgmma_wait<1>(); // S_j is done; P_{j-1} V_{j-1} may still run
        softmax_tile(s, m, l, alpha, a, w, j * T::BC);
        wgmma_wait<0>(); // P_{j-1} V_{j-1} is done: its stage goes back, Õ may change
        release(&sm.kv_empty[stage_of(j - 1)], lane);
        rescale(o, alpha);
        p_fragments(pa, s);
        /* exercise: end */
    }
    mbar_arrive(&sm.q_empty); // every S = Q K^T of this warpgroup is done: Q_i may go (every thread
                              // arrives: each has read sm.tile, and racecheck sees no order otherwise)
    if (own_tiles > 0) { // round own_tiles: the last tile's P V
        Turn::wait(c);
        issue_pv<D>(o, pa, sm, stage_of(own_tiles - 1));
        Turn::pass(c);
        wgmma_wait<0>();
        release(&sm.kv_empty[stage_of(own_tiles - 1)], lane);
    }
    for (int j = own_tiles; j < n_tiles; j++) { // another warpgroup's last tiles: empty rounds
        Turn::wait(c);
        Turn::pass(c);
        mbar_wait(&sm.kv_full[stage_of(j)], phase_of(j));
        release(&sm.kv_empty[stage_of(j)], lane);
    }
    if (own_tiles == 0 && n_tiles > 0) { // n_tiles + 1 rounds in all, as the others
        Turn::wait(c);
        Turn::pass(c);
    }

    store_rows<D>(a, o, m, l, w, bh, rows, tid);
}

template <int D, int HIDE>
__global__ void __launch_bounds__(FwdTile<D>::NT, 1)
    hopper_forward_kernel(const __grid_constant__ CUtensorMap mq, const __grid_constant__ CUtensorMap mk,
                          const __grid_constant__ CUtensorMap mv, TcArgs a, int n_work)
{
    using T = FwdTile<D>;
    using Turn = Turns<HIDE, T::CONSUMERS>;
    FwdSmem<D> &sm = aligned_smem<FwdSmem<D>>();
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        mbar_init(&sm.q_full, 1);                // the producer's arrive (+ TMA's bytes)
        mbar_init(&sm.q_empty, 128 * T::CONSUMERS); // one arrive per consumer thread
        for (int st = 0; st < T::NSTAGE; st++) {
            mbar_init(&sm.kv_full[st], 1);
            mbar_init(&sm.kv_empty[st], 4 * T::CONSUMERS);
        }
        fence_barrier_init();
    }
    __syncthreads();

    // Query tile n of this block is announced on q_full's phase n: the producer writes its number
    // into sm.tile before the arrive that opens the phase (a number past the last tile: stop).
    if (wg == 0) {
        regs_release<T::PRODUCER_REGS>();
        if (threadIdx.x != 0)
            return;
        unsigned it = 0; // K/V tiles loaded so far: the ring's position
        for (int n = 0, tile = blockIdx.x;; n++) {
            if (n > 0) // the consumers' last S = Q K^T of tile n - 1 is done
                mbar_wait(&sm.q_empty, (n - 1) & 1);
            sm.tile = tile;
            if (tile >= n_work) {
                mbar_arrive(&sm.q_full);
                return;
            }
            const FwdWork w = fwd_work<D>(a, tile, n_work);
            const int h = w.bh % a.Hq, b = w.bh / a.Hq, kvh = b * (a.Hq / a.group) + h / a.group;
            produce<D>(sm, &mq, &mk, &mv, a, w.bh, kvh, w.q0, w.n_tiles, it);
            it += w.n_tiles;
            // the next tile, claimed now that this one's copies are issued (its latency hides under
            // the q_empty wait); without a counter the block's one tile was all
            tile = a.next_tile ? (int)gridDim.x + atomicAdd(a.next_tile, 1) : n_work;
        }
    }
    regs_acquire<T::CONSUMER_REGS>();
    const int c = wg - 1;
    if (c == T::CONSUMERS - 1) // warpgroup 0 goes first
        Turn::pass(c);
    unsigned it = 0;
    for (int n = 0;; n++) {
        mbar_wait(&sm.q_full, n & 1);
        const int tile = *(volatile int *)&sm.tile;
        if (tile >= n_work)
            break;
        const FwdWork w = fwd_work<D>(a, tile, n_work);
        consume<D, HIDE>(sm, a, c, w.bh, w.q0 + T::ROWS * c, w.n_tiles, it);
        it += w.n_tiles;
    }
    if (c == 0) // the turn warpgroup 0 was last given, taken back
        Turn::wait(c);
}

// ==== the ablation's first rungs: Hopper's pieces one at a time ==================================
//
// The stage's forward brings wgmma, TMA, mbarriers and warp specialization in together. Two more
// forward kernels take them apart for the ablation (README, "What each piece buys"). Every
// warpgroup computes (no producer warpgroup, no setmaxnreg, no turns, no overlap inside a
// warpgroup: the `serial` consumer's rounds), a block per query tile, and the K/V ring is filled
//   LOAD_CP_ASYNC  (variant "wgmma-only") by every thread with 16-byte cp.async copies into the
//                  same 128-byte swizzled layout TMA writes, so wgmma reads the tiles as in the
//                  stage: wgmma alone;
//   LOAD_TMA       (variant "wgmma-tma") by one thread with TMA, completing on the ring's
//                  mbarriers: wgmma and TMA, without warp specialization.
// Without a producer warpgroup the ring is refilled between rounds: the warpgroups meet at a block
// barrier after each K/V tile, and then the tile NSTAGE (TMA) or NSTAGE - 1 (cp.async) ahead goes
// into the stage that is free. What the stage's producer warpgroup buys is that no such barrier
// holds every consumer to the slowest one.
enum Load : int { LOAD_CP_ASYNC = 0, LOAD_TMA = 1 };

template <int D> __host__ __device__ constexpr int inline_threads() { return 128 * FwdTile<D>::CONSUMERS; }

// Rows [row0, row0 + ROWS) of a matrix of `rows_total` rows of D bf16 each (at base) into a tile of
// 64-column swizzled blocks dst[cb][r][64], as TMA_SWIZZLE_128B lays a box out: 16-byte chunk c of
// a block's row r at chunk c ^ (r % 8). Rows outside 0 .. rows_total - 1 become zeros (TMA's fill).
// The block's nt threads take the chunks in turn.
template <int D, int ROWS>
__device__ void copy_swizzled(bf16 (*dst)[ROWS][64], const bf16 *base, int rows_total, int row0, int tid, int nt)
{
    constexpr int CHUNKS = D / 8;
    for (int idx = tid; idx < ROWS * CHUNKS; idx += nt) {
        const int r = idx / CHUNKS, c = idx % CHUNKS, cb = c / 8, cc = c % 8, row = row0 + r;
        const bool ok = row >= 0 && row < rows_total;
        cp_async16(&dst[cb][r][8 * (cc ^ (r % 8))], ok ? base + (size_t)row * D + 8 * c : base, ok ? 16 : 0);
    }
}

template <int D, int LOAD>
__global__ void __launch_bounds__(inline_threads<D>(), 1)
    hopper_forward_inline_kernel(const __grid_constant__ CUtensorMap mq, const __grid_constant__ CUtensorMap mk,
                                 const __grid_constant__ CUtensorMap mv, TcArgs a)
{
    using T = FwdTile<D>;
    constexpr int NT = inline_threads<D>(), NS = T::NSTAGE, BC = T::BC;
    FwdSmem<D> &sm = aligned_smem<FwdSmem<D>>();
    const int tid = threadIdx.x, c = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
    const FwdWork w = fwd_work<D>(a, blockIdx.x, (int)gridDim.x); // a block per query tile
    const int h = w.bh % a.Hq, b = w.bh / a.Hq, kvh = b * (a.Hq / a.group) + h / a.group;

    // K_j and V_j of tile j into stage j % NS: by TMA (one thread), or by every thread's cp.async
    const auto load_kv = [&](int j) {
        const int st = j % NS;
        if constexpr (LOAD == LOAD_TMA) {
            if (tid == 0) {
                mbar_arrive_expect_tx(&sm.kv_full[st], sizeof sm.k[0] + sizeof sm.v[0]);
                for (int cb = 0; cb < T::CBLK; cb++) {
                    tma_load_3d(&sm.k[st][cb][0][0], &mk, 64 * cb, j * BC, kvh, &sm.kv_full[st]);
                    tma_load_3d(&sm.v[st][cb][0][0], &mv, 64 * cb, j * BC, kvh, &sm.kv_full[st]);
                }
            }
        } else {
            copy_swizzled<D, BC>(sm.k[st], a.k + (size_t)kvh * a.Tk * D, a.Tk, j * BC, tid, NT);
            copy_swizzled<D, BC>(sm.v[st], a.v + (size_t)kvh * a.Tk * D, a.Tk, j * BC, tid, NT);
        }
        if (tid == 0)
            hbm_dev_add(a.hbm, HBM_READ, (unsigned long long)min(BC, a.Tk - j * BC) * 2 * D * sizeof(bf16));
    };

    if (tid == 0) {
        mbar_init(&sm.q_full, 1);
        for (int st = 0; st < NS; st++)
            mbar_init(&sm.kv_full[st], 1);
        fence_barrier_init();
    }
    __syncthreads();
    // Q_i, then the first K/V tiles: NS of them by TMA, NS - 1 by cp.async (one commit group each,
    // empty past the walk), the stage left over being the one a round fills
    if constexpr (LOAD == LOAD_TMA) {
        if (tid == 0) {
            mbar_arrive_expect_tx(&sm.q_full, sizeof sm.q);
            for (int cc = 0; cc < T::CONSUMERS; cc++)
                for (int cb = 0; cb < T::CBLK; cb++)
                    tma_load_3d(&sm.q[cc][cb][0][0], &mq, 64 * cb, w.q0 + T::ROWS * cc, w.bh, &sm.q_full);
        }
    } else {
        for (int cc = 0; cc < T::CONSUMERS; cc++)
            copy_swizzled<D, T::ROWS>(sm.q[cc], a.q + (size_t)w.bh * a.Tq * D, a.Tq, w.q0 + T::ROWS * cc, tid, NT);
        cp_async_commit();
    }
    if (tid == 0)
        hbm_dev_add(a.hbm, HBM_READ, (unsigned long long)(w.q0 + T::BR - max(w.q0, 0)) * D * sizeof(bf16));
    for (int j = 0; j < (LOAD == LOAD_TMA ? NS : NS - 1); j++) {
        if (j < w.n_tiles)
            load_kv(j);
        if constexpr (LOAD == LOAD_CP_ASYNC)
            cp_async_commit();
    }
    if constexpr (LOAD == LOAD_TMA)
        mbar_wait(&sm.q_full, 0);

    // This warpgroup's rows and own tiles, as in consume()
    const WarpgroupRows mine = warpgroup_rows(a, w.q0 + T::ROWS * c, warp, lane, BC);
    const Rows rw = mine.w;
    const int rows = mine.rows, own_tiles = mine.own_tiles;
    float o[T::NO][4];
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2];
#pragma unroll
    for (int n = 0; n < T::NO; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float s[BC / 8][4];
    uint32_t pa[BC / 16][4];

    for (int j = 0; j < w.n_tiles; j++) {
        const int st = j % NS;
        if constexpr (LOAD == LOAD_TMA) {
            mbar_wait(&sm.kv_full[st], (uint32_t)(j / NS) & 1);
        } else {
            cp_async_wait<NS - 2>(); // Q_i and tile j have landed for this thread ...
            fence_proxy_async();     // ... are visible to wgmma (the async proxy) ...
            __syncthreads();         // ... for every thread; and every round j - 1 is over
            if (j + NS - 1 < w.n_tiles)
                load_kv(j + NS - 1); // into stage (j - 1) % NS, which round j - 1 left
            cp_async_commit();
        }
        if (j < own_tiles) { // round j, serial: S_j, its softmax, then P_j V_j
            issue_scores<D>(s, sm, c, st);
            wgmma_wait<0>();
            softmax_tile(s, m, l, alpha, a, rw, j * BC);
            rescale(o, alpha);
            p_fragments(pa, s);
            issue_pv<D>(o, pa, sm, st);
            wgmma_wait<0>();
        }
        if constexpr (LOAD == LOAD_TMA) {
            __syncthreads(); // every warpgroup is done with stage st
            if (j + NS < w.n_tiles)
                load_kv(j + NS);
        }
    }
    if constexpr (LOAD == LOAD_CP_ASYNC)
        cp_async_wait<0>(); // no copy still in flight when the block ends (only empty groups are left)
    store_rows<D>(a, o, m, l, rw, w.bh, rows, tid % 128);
}

// ==== the backward pass, on Hopper ================================================================
//
// Per head, with P = exp2(S scale log2(e) - lse log2(e)) recomputed from the saved lse:
//   D  = rowsum(dO ∘ O)      (Tq)       bwd_d_kernel, into the workspace
//   dV = P^T dO              (Tk, D)    dP = dO V^T (Tq, Tk)    dS = P ∘ (dP - D)
//   dK = scale dS^T Q        (Tk, D)    dQ = scale dS K (Tq, D)

// D = rowsum(dO ∘ O), one warp per query row (dO in bf16 as the kernels read it, O in float32).
template <int D>
__global__ void bwd_d_kernel(const bf16 *dO, const float *o, float *Dout, long long rows,
                             unsigned long long *hbm)
{
    const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    float acc = 0.0f;
#pragma unroll
    for (int c = lane; c < D; c += 32)
        acc = fmaf(__bfloat162float(dO[row * D + c]), o[row * D + c], acc);
    acc = row_sum<32>(acc);
    if (lane == 0) {
        Dout[row] = acc;
        hbm_dev_add(hbm, HBM_READ, (unsigned long long)D * (sizeof(bf16) + sizeof(float)));
        hbm_dev_add(hbm, HBM_WRITTEN, sizeof(float));
    }
}

// The query tiles a key tile meets, as a flat walk over (head of the group, query tile): with
// causal masking the tiles that end before the key tile's first key are skipped.
struct QueryWalk {
    int first_tile, tiles_per_head, steps;
    __device__ QueryWalk(const TcArgs &a, int kv0, int br)
    {
        const int first_row = tc_first_row_seeing(a.causal, a.Tq, a.Tk, kv0);
        first_tile = first_row / br;
        tiles_per_head = first_row < a.Tq ? ceil_div(a.Tq, br) - first_tile : 0;
        steps = tiles_per_head * a.group;
    }
    __device__ int head(int step, int hq0) const { return hq0 + step / tiles_per_head; }
    __device__ int tile(int step) const { return first_tile + step % tiles_per_head; }
};

// The kernel, after D (bwd_d_kernel): one block per K/V tile K_j, V_j of one kv head (BC = 128
// keys and three warpgroups at d = 128, 192 keys and four at d = 64); it walks every query tile Q_i (BR = 64 rows) of every
// query head of the group (stage 12's walk):
//   warpgroup 0, the producer: one thread loads K_j and V_j once with TMA, then Q_i and dO_i of each
//     step into a ring of NSTAGE stages; the rest of its first warp copies lse_i (times log2 e) and
//     D_i beside them, and all 32 arrive on the stage's q_full barrier;
//   warpgroups 1, 2 (and 3), the consumers: warpgroup c owns keys 64c .. 64c + 63 of the tile, keeps their
//     rows of dK_j and dV_j in registers, and for each query tile computes by wgmma
//       S^T = K_c Q_i^T,  dP^T = V_c dO_i^T   (64, BR)  both operands K-major in shared memory
//       P^T, dS^T                              element-wise, in registers
//       dV_c += P^T dO_i,  dK_c += dS^T Q_i   (64, D)   P^T, dS^T from registers; dO_i, Q_i MN-major
//       dQ_i += dS K_c                         (BR, D)  dS^T through shared memory, K_c MN-major
//     adds scale dQ_i into dQ in HBM with float32 atomics and hands the stage back (q_empty).
// Computing S^T rather than S puts the keys in the wgmma's M, so the accumulators of S^T and dP^T
// are, after rounding, the A operands of dV += P^T dO and dK += dS^T Q: no trip through shared memory
// (stage 12 does the same with mma.sync). dQ needs dS with the queries in M: each warpgroup writes
// its dS^T (bf16) to shared memory and a wgmma reads it back transposed. Each warpgroup adds its own
// 64 keys' share of dQ_i, so the warpgroups never wait for each other, at the price of one atomic
// add per element of dQ_i, step and warpgroup.
// At d = 64 a block has three consumer warpgroups (192 keys; 160 registers each), at d = 128 two:
// a step is half as long at d = 64, and a third warpgroup's steps hide more of each one's waits.
template <int D> struct WgBwdTile {
    static constexpr int BR = TC_BWD_BLOCK_R, BC = TC_BWD_BLOCK_C(D);
    static constexpr int KEYS = TC_BWD_WG_KEYS;     // keys of one consumer warpgroup (one wgmma M)
    static constexpr int CONSUMERS = BC / KEYS, NT = 128 * (1 + CONSUMERS);
    // Q_i, dO_i stages in the ring: 3 rather than 2 let the producer run further ahead, which at
    // d = 64 (short steps) was 4-8 % faster on an H100 and at d = 128 the same
    static constexpr int NSTAGE = 3;
    static constexpr int CBLK = D / 64, NO = D / 8, NQ = BR / 8; // 64-column blocks; 8-column blocks
    static constexpr int PRODUCER_REGS = 24, CONSUMER_REGS = CONSUMERS == 3 ? 160 : 240;
    static_assert(regs_fit(CONSUMERS, PRODUCER_REGS, CONSUMER_REGS), "more registers than the block has");
    // dQ's adds by 16-byte vector atomics (add_dq), half as many instructions as pairs: 6 % off
    // the forward + backward at d = 128 (H200, B 8, H 16, T 4096). At d = 64 the shuffles that
    // gather the quads cost registers the three consumers of 160 do not have (spill loads 8 -> 48
    // bytes; it was 6 % slower causal, measured at 16 -> 32), so there the pairs stay.
    static constexpr bool QUAD_ATOMICS = CONSUMERS == 2;
};

template <int D> struct WgBwdSmem {
    using T = WgBwdTile<D>;
    alignas(1024) bf16 k[T::CBLK][T::BC][64];                // K_j   (BC, D)
    alignas(1024) bf16 v[T::CBLK][T::BC][64];                // V_j   (BC, D)
    alignas(1024) bf16 q[T::NSTAGE][T::CBLK][T::BR][64];     // Q_i   (BR, D), one per stage
    alignas(1024) bf16 dO[T::NSTAGE][T::CBLK][T::BR][64];    // dO_i  (BR, D), one per stage
    alignas(1024) bf16 dst[T::CONSUMERS][2][T::KEYS][T::BR]; // dS^T of each consumer, two buffers
    float lse2[T::NSTAGE][T::BR], dsum[T::NSTAGE][T::BR];    // lse_i log2(e) and D_i
    uint64_t kv_full, q_full[T::NSTAGE], q_empty[T::NSTAGE];
    static constexpr size_t BYTES = sizeof(WgBwdSmem) + 1024;
};

// The producer's first warp: K_j, V_j once, then for each step Q_i and dO_i (TMA, lane 0) and
// lse_i log2(e), D_i (all lanes, plain loads; rows past Tq get 0 and are masked by the consumers).
template <int D>
__device__ void produce_bwd(WgBwdSmem<D> &sm, const CUtensorMap *mq, const CUtensorMap *mdo, const CUtensorMap *mk,
                            const CUtensorMap *mv, const TcArgs &a, const QueryWalk &walk, int hq0, int kvbh,
                            int kv0, int lane)
{
    using T = WgBwdTile<D>;
    if (lane == 0) {
        mbar_arrive_expect_tx(&sm.kv_full, sizeof sm.k + sizeof sm.v);
        for (int cb = 0; cb < T::CBLK; cb++) {
            tma_load_3d(&sm.k[cb][0][0], mk, 64 * cb, kv0, kvbh, &sm.kv_full);
            tma_load_3d(&sm.v[cb][0][0], mv, 64 * cb, kv0, kvbh, &sm.kv_full);
        }
        hbm_dev_add(a.hbm, HBM_READ, (unsigned long long)min(T::BC, a.Tk - kv0) * 2 * D * sizeof(bf16));
    }
    for (int step = 0; step < walk.steps; step++) {
        const int st = step % T::NSTAGE, use = step / T::NSTAGE;
        const int hq = walk.head(step, hq0), q0 = walk.tile(step) * T::BR, rows = min(T::BR, a.Tq - q0);
        if (use > 0) // the consumers' previous use of this stage (phase use - 1) must be over
            mbar_wait(&sm.q_empty[st], (use - 1) & 1);
        const size_t row0 = (size_t)hq * a.Tq + q0;
        for (int r = lane; r < T::BR; r += 32) {
            sm.lse2[st][r] = r < rows ? a.lse[row0 + r] * kLog2e : 0.0f;
            sm.dsum[st][r] = r < rows ? a.D[row0 + r] : 0.0f;
        }
        if (lane == 0) { // its arrive also announces the bytes TMA will deliver
            mbar_arrive_expect_tx(&sm.q_full[st], sizeof sm.q[0] + sizeof sm.dO[0]);
            for (int cb = 0; cb < T::CBLK; cb++) {
                tma_load_3d(&sm.q[st][cb][0][0], mq, 64 * cb, q0, hq, &sm.q_full[st]);
                tma_load_3d(&sm.dO[st][cb][0][0], mdo, 64 * cb, q0, hq, &sm.q_full[st]);
            }
            hbm_dev_add(a.hbm, HBM_READ, (unsigned long long)rows * (2 * D * sizeof(bf16) + 2 * sizeof(float)));
        } else {
            mbar_arrive(&sm.q_full[st]);
        }
    }
}

// Issues X^T = R_c C^T (64, BR) as one commit group: R_c = rows 64c.. of K_j or V_j (A), C = Q_i or
// dO_i (B), both K-major in 64-column swizzled blocks (rs: BC rows a block, cs: BR rows a block).
template <int D>
__device__ __forceinline__ void issue_transposed(float (&x)[TC_BWD_BLOCK_R / 8][4], const bf16 *rs, const bf16 *cs, int c)
{
    using T = WgBwdTile<D>;
    zero(x);
    wgmma_fence();
#pragma unroll
    for (int k16 = 0; k16 < D / 16; k16++) { // columns 16 k16 ..: block k16 / 4, 32 (k16 % 4) bytes in
        const int cb = k16 / 4, at = 32 * (k16 % 4);
        const char *a = reinterpret_cast<const char *>(rs + (cb * T::BC + T::KEYS * c) * 64) + at;
        const char *b = reinterpret_cast<const char *>(cs + cb * T::BR * 64) + at;
        wgmma_m64n64k16_bf16(&x[0][0], wgmma_desc_sw128(a, 16, 1024), wgmma_desc_sw128(b, 16, 1024), k16 > 0);
    }
    wgmma_commit();
}

// Issues acc (64, D) += F C_i with F (64, BR) as bf16 A fragments in registers (P^T or dS^T) and
// C_i (BR, D) = dO_i or Q_i read MN-major (its rows are the product's K); no commit.
template <int D>
__device__ __forceinline__ void issue_from_registers(float (&acc)[D / 8][4], const uint32_t (&f)[TC_BWD_BLOCK_R / 16][4],
                                                     const bf16 *cs)
{
    using T = WgBwdTile<D>;
#pragma unroll
    for (int kc = 0; kc < T::BR / 16; kc++) { // queries 16 kc .. 16 kc + 15
        // MN-major: 64-column blocks BR * 128 bytes apart (leading), 8-row groups 1024 (stride)
        const uint64_t b = wgmma_desc_sw128(cs + 16 * kc * 64, T::BR * 128, 1024);
        if constexpr (D == 128)
            wgmma_m64n128k16_bf16_rs(&acc[0][0], f[kc], b, 1);
        else
            wgmma_m64n64k16_bf16_rs(&acc[0][0], f[kc], b, 1);
    }
}

// Issues dQ_c = dS_c K_c (BR, D) as one commit group: dS_c (BR, 64) read transposed from the
// warpgroup's dS^T (64 keys of BR bf16: one swizzled block), K_c (64, D) read MN-major.
template <int D>
__device__ __forceinline__ void issue_dq(float (&dq)[D / 8][4], const bf16 (&dst)[TC_BWD_WG_KEYS][TC_BWD_BLOCK_R],
                                         const WgBwdSmem<D> &sm, int c)
{
    using T = WgBwdTile<D>;
    wgmma_fence();
#pragma unroll
    for (int kc = 0; kc < T::KEYS / 16; kc++) { // keys 64 c + 16 kc ..
        const uint64_t a = wgmma_desc_sw128(&dst[16 * kc][0], T::KEYS * 128, 1024);
        const uint64_t b = wgmma_desc_sw128(&sm.k[0][T::KEYS * c + 16 * kc][0], T::BC * 128, 1024);
        if constexpr (D == 128)
            wgmma_m64n128k16_bf16<1, 1>(&dq[0][0], a, b, kc > 0);
        else
            wgmma_m64n64k16_bf16<1, 1>(&dq[0][0], a, b, kc > 0);
    }
    wgmma_commit();
}

// One consumer thread's place: keys key[0] = 64 c + 16 warp + g and key[1] = key[0] + 8 of the
// tile (rows of S^T, dP^T, dK, dV); element e of an accumulator's 8-column block n sits at row
// key[e / 2] and column 8 n + 2 t4 + e % 2 (a query row of the tile in S^T, a feature in dK, dV).
struct Keys {
    int key[2], warp, g, t4;
};

// P^T = exp2(S^T scale log2(e) - lse log2(e)) in place, 0 where the mask hides the pair; then
// dS^T = P^T ∘ (dP^T - D) in place of dP^T (P unrounded, as in the reference).
__device__ __forceinline__ void probabilities_and_ds(float (&s)[TC_BWD_BLOCK_R / 8][4], float (&dp)[TC_BWD_BLOCK_R / 8][4],
                                                     const float *lse2, const float *dsum, const TcArgs &a,
                                                     const Keys &w, int q0, bool masked)
{
#pragma unroll
    for (int n = 0; n < TC_BWD_BLOCK_R / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int c = 8 * n + 2 * w.t4 + (e & 1); // query row within the tile
            // a row that saw no key (lse = -inf) has P = 0 for every key: the mask covers it
            float p = fast_exp2(fmaf(s[n][e], a.scale_log2, -lse2[c]));
            if (masked && hidden(a, q0 + c, w.key[e >> 1]))
                p = 0.0f;
            s[n][e] = p;
            /* exercise: begin — dS^T = P^T ∘ (dP^T - D) for element e of tile n (check 14 --device cuda: dq and dk) | stub: dp[n][e] = 0.0f; */
            dp[n][e] = p * (dp[n][e] - dsum[c]);
            /* exercise: end */
        }
}

// Accumulators (64, BR) as bf16 A fragments over BR: the rounding points of P and dS.
__device__ __forceinline__ void to_fragments(uint32_t (&f)[TC_BWD_BLOCK_R / 16][4], const float (&x)[TC_BWD_BLOCK_R / 8][4])
{
#pragma unroll
    for (int kc = 0; kc < TC_BWD_BLOCK_R / 16; kc++)
        a_from_c(f[kc], x[2 * kc], x[2 * kc + 1]);
}

// The warpgroup's dS^T fragments into shared memory, in the 128-byte swizzled layout a wgmma
// reads: key row r (BR = 64 bf16, 128 bytes), 16-byte chunk k of it at chunk k ^ (r % 8). A
// fragment's registers hold (row g, chunk 2kc), (row g + 8, 2kc), (row g, 2kc + 1), (row g + 8, 2kc + 1).
__device__ __forceinline__ void store_ds_transposed(bf16 (&dst)[TC_BWD_WG_KEYS][TC_BWD_BLOCK_R],
                                                    const uint32_t (&f)[TC_BWD_BLOCK_R / 16][4], const Keys &w)
{
    char *base = reinterpret_cast<char *>(&dst[0][0]);
#pragma unroll
    for (int kc = 0; kc < TC_BWD_BLOCK_R / 16; kc++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int row = 16 * w.warp + w.g + 8 * (r & 1), chunk = 2 * kc + (r >> 1);
            *reinterpret_cast<uint32_t *>(base + row * 128 + ((chunk ^ (row % 8)) * 16) + 4 * w.t4) = f[kc][r];
        }
}

// dQ_i += scale dQ_c: rows q0 + 16 warp + g (+ 8) of head hq, a vector atomic per 4 columns
// (fragment_quad gathers them) or per 2 (a fragment's own pairs), as WgBwdTile chooses.
template <int D>
__device__ __forceinline__ void add_dq(const TcArgs &a, const float (&dq)[D / 8][4], const Keys &w, int hq, int q0)
{
    const int row0 = q0 + 16 * w.warp + w.g;
    if constexpr (WgBwdTile<D>::QUAD_ATOMICS) {
        const int row = row0 + fragment_quad_row(w.t4);
        float *dst = a.dQ + ((size_t)hq * a.Tq + row) * D + fragment_quad_col(w.t4);
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            const float4 v = fragment_quad(w.t4, a.scale * dq[n][0], a.scale * dq[n][1], a.scale * dq[n][2],
                                           a.scale * dq[n][3]);
            if (row < a.Tq)
                atomicAdd(reinterpret_cast<float4 *>(dst + 8 * n), v);
        }
    } else {
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            if (row0 + 8 * rr >= a.Tq)
                continue;
            float *dst = a.dQ + ((size_t)hq * a.Tq + row0 + 8 * rr) * D + 2 * w.t4;
#pragma unroll
            for (int n = 0; n < D / 8; n++)
                atomic_add_pair(dst + 8 * n, a.scale * dq[n][2 * rr], a.scale * dq[n][2 * rr + 1]);
        }
    }
    if (threadIdx.x % 128 == 0) {
        const unsigned long long rows = min(TC_BWD_BLOCK_R, a.Tq - q0);
        const unsigned long long bytes = rows * D * sizeof(float);
        hbm_dev_add(a.hbm, HBM_READ, bytes); // dQ: read-modify-write
        hbm_dev_add(a.hbm, HBM_WRITTEN, bytes);
    }
}

// One consumer warpgroup: keys kc0 .. kc0 + 63 of the tile (kc0 = kv0 + 64 c), every step of the walk.
template <int D>
__device__ void consume_bwd(WgBwdSmem<D> &sm, const TcArgs &a, const QueryWalk &walk, int c, int hq0, int kvbh, int kv0)
{
    using T = WgBwdTile<D>;
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, g = lane / 4;
    const int kc0 = kv0 + T::KEYS * c, keys = min(T::KEYS, a.Tk - kc0); // keys <= 0: none here
    const Keys w = {{kc0 + 16 * warp + g, kc0 + 16 * warp + g + 8}, warp, g, lane % 4};
    float dk[T::NO][4], dv[T::NO][4];
    zero(dk);
    zero(dv);

    mbar_wait(&sm.kv_full, 0);
    for (int step = 0; step < walk.steps; step++) {
        const int st = step % T::NSTAGE, hq = walk.head(step, hq0), q0 = walk.tile(step) * T::BR;
        const bool masked = kc0 + T::KEYS > a.Tk || q0 + T::BR > a.Tq ||
                            (a.causal && kc0 + T::KEYS - 1 > q0 + a.Tk - a.Tq);
        mbar_wait(&sm.q_full[st], (step / T::NSTAGE) & 1); // Q_i, dO_i, lse_i, D_i are in
        float s[T::NQ][4], dp[T::NQ][4];
        issue_transposed<D>(s, &sm.k[0][0][0], &sm.q[st][0][0][0], c);   // S^T
        issue_transposed<D>(dp, &sm.v[0][0][0], &sm.dO[st][0][0][0], c); // dP^T
        wgmma_wait<0>();
        probabilities_and_ds(s, dp, sm.lse2[st], sm.dsum[st], a, w, q0, masked);

        uint32_t pa[T::NQ / 2][4], dsa[T::NQ / 2][4];
        to_fragments(pa, s);
        to_fragments(dsa, dp);
        wgmma_fence();
        issue_from_registers<D>(dv, pa, &sm.dO[st][0][0][0]); // dV_c += P^T dO_i
        wgmma_commit();
        // dS^T to shared memory (buffer step % 2: the other one may still be read by the last
        // step's dQ wgmma of a slower warp), made visible to wgmma, while dV runs
        bf16(&dst)[T::KEYS][T::BR] = sm.dst[c][step & 1];
        store_ds_transposed(dst, dsa, w);
        fence_proxy_async();
        named_barrier_sync(1 + c, 128);
        wgmma_wait<0>(); // dV is done: pa is free (registers: dK, dV and dQ_c must fit beside dsa)
        float dq[T::NO][4];
        issue_dq<D>(dq, dst, sm, c);                          // dQ_c = dS_c K_c
        wgmma_fence();
        issue_from_registers<D>(dk, dsa, &sm.q[st][0][0][0]); // dK_c += dS^T Q_i
        wgmma_commit();
        wgmma_wait<1>(); // dQ_c is done (groups finish in order): add it to HBM while dK runs
        if (keys > 0) // its own share (none without keys: dS is all zero)
            add_dq<D>(a, dq, w, hq, q0);
        wgmma_wait<0>();
        mbar_arrive(&sm.q_empty[st]); // every thread: its reads of lse_i, D_i are over (with one arrive
                                      // per warp after __syncwarp racecheck reported hazards: README)
    }

    // dK_c = scale dS^T Q and dV_c: written once, float32
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        if (w.key[rr] >= a.Tk)
            continue;
        float *dkrow = a.dK + ((size_t)kvbh * a.Tk + w.key[rr]) * D;
        float *dvrow = a.dV + ((size_t)kvbh * a.Tk + w.key[rr]) * D;
#pragma unroll
        for (int n = 0; n < T::NO; n++) {
            *reinterpret_cast<float2 *>(dkrow + 8 * n + 2 * w.t4) =
                make_float2(a.scale * dk[n][2 * rr], a.scale * dk[n][2 * rr + 1]);
            *reinterpret_cast<float2 *>(dvrow + 8 * n + 2 * w.t4) = make_float2(dv[n][2 * rr], dv[n][2 * rr + 1]);
        }
    }
    if (tid == 0 && keys > 0)
        hbm_dev_add(a.hbm, HBM_WRITTEN, (unsigned long long)keys * 2 * D * sizeof(float));
}

template <int D>
__global__ void __launch_bounds__(WgBwdTile<D>::NT, 1)
    hopper_backward_kernel(const __grid_constant__ CUtensorMap mq, const __grid_constant__ CUtensorMap mdo,
                           const __grid_constant__ CUtensorMap mk, const __grid_constant__ CUtensorMap mv, TcArgs a)
{
    using T = WgBwdTile<D>;
    WgBwdSmem<D> &sm = aligned_smem<WgBwdSmem<D>>();
    // grid (key tiles, kv heads), as stage 12: the blocks running together share a head, so the Q
    // and dO tiles every block of the head streams are served from L2
    const int kvbh = blockIdx.y, hkv = kvbh % (a.Hq / a.group), b = kvbh / (a.Hq / a.group);
    const int hq0 = b * a.Hq + hkv * a.group; // first query head (b, h) of the group, flattened
    const int kv0 = blockIdx.x * T::BC;
    const QueryWalk walk(a, kv0, T::BR);
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        mbar_init(&sm.kv_full, 1);
        for (int st = 0; st < T::NSTAGE; st++) {
            mbar_init(&sm.q_full[st], 32);                  // the producer warp's 32 arrives (+ TMA's bytes)
            mbar_init(&sm.q_empty[st], 128 * T::CONSUMERS); // one arrive per consumer thread
        }
        fence_barrier_init();
    }
    __syncthreads();

    if (wg == 0) {
        regs_release<T::PRODUCER_REGS>();
        if (threadIdx.x < 32)
            produce_bwd<D>(sm, &mq, &mdo, &mk, &mv, a, walk, hq0, kvbh, kv0, threadIdx.x);
    } else {
        regs_acquire<T::CONSUMER_REGS>();
        consume_bwd<D>(sm, a, walk, wg - 1, hq0, kvbh, kv0);
    }
}

// Raises the dynamic shared-memory limit of `kernel` to `bytes`.
template <typename Kernel> int allow_smem(Kernel kernel, size_t bytes, const char *name, FlError *err)
{
    return fl_cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
                          name, err);
}

// One tensor map to build: `mats` (B x heads) row-major matrices of `rows` x D bf16 at base, read in
// boxes of box_rows x 64 columns stored with the 128-byte swizzle.
struct TileMap {
    CUtensorMap *map;
    const bf16 *base;
    int mats, rows, box_rows;
};

template <int D> int map_tiles(std::initializer_list<TileMap> maps, FlError *err)
{
    for (const TileMap &m : maps) {
        const int rc = tma_map_bf16(m.map, m.base, m.mats, m.rows, D, m.box_rows, 64, err, TMA_SWIZZLE_128B);
        if (rc != FL_OK)
            return rc;
    }
    return FL_OK;
}

// How many blocks the forward's grid has. The kernel is written for a persistent grid (each block
// takes query tiles until none are left): the stage launches one block per SM, and the variant
// "per-tile" one block per query tile (no counter; 1-4% slower at T = 4096 on an H200, README).
// --blocks N sets the number for any variant (the tests use 1 and 3).
enum Grid : int { GRID_PER_TILE = 0, GRID_PER_SM = 1 };

// blocks: the grid's size from --blocks (0 = the variant's choice; never more than the query tiles).
template <int D, int HIDE> int forward_launch(const TcArgs &a, int heads, int kv_heads, Grid grid, int blocks, FlError *err)
{
    using T = FwdTile<D>;
    CUtensorMap mq, mk, mv; // q (B Hq, Tq, D), k and v (B Hkv, Tk, D)
    int rc = map_tiles<D>({{&mq, a.q, heads, a.Tq, T::ROWS}, {&mk, a.k, kv_heads, a.Tk, T::BC},
                           {&mv, a.v, kv_heads, a.Tk, T::BC}}, err);
    if (rc == FL_OK)
        rc = allow_smem(hopper_forward_kernel<D, HIDE>, FwdSmem<D>::BYTES, "hopper_forward_kernel", err);
    int dev = 0, sms = 0;
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaGetDevice(&dev), "cudaGetDevice", err);
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute", err);
    if (rc != FL_OK)
        return rc;
    const long long n_work = (long long)ceil_div(a.Tq, T::BR) * heads; // query tiles of every head
    const long long want = blocks > 0 ? blocks : grid == GRID_PER_SM ? sms : n_work;
    const long long size = n_work < want ? n_work : want;
    if (n_work + size > INT_MAX) // the counter runs to n_work + size
        return fl_fail(err, FL_UNSUPPORTED, "stage 14 (cuda): %lld query tiles; the kernel numbers them "
                       "with 32-bit ints", n_work);
    TcArgs args = a;
    if (size == n_work) // a block per tile: no counter
        args.next_tile = NULL;
    else if (!a.next_tile)
        return fl_fail(err, FL_BAD_INPUT, "stage 14 (cuda): no workspace for the forward's work counter");
    else // the blocks count the query tiles they take from here on
        rc = fl_cuda_status(cudaMemsetAsync(a.next_tile, 0, sizeof(int)), "zeroing the work counter", err);
    if (rc != FL_OK)
        return rc;
    hopper_forward_kernel<D, HIDE><<<(unsigned)size, T::NT, FwdSmem<D>::BYTES>>>(mq, mk, mv, args, (int)n_work);
    return fl_cuda_launch_status("hopper_forward_kernel", err);
}

// The ablation's inline-loading forward (LOAD_CP_ASYNC or LOAD_TMA): a block per query tile.
template <int D, int LOAD> int forward_inline_launch(const TcArgs &a, int heads, int kv_heads, int blocks, FlError *err)
{
    using T = FwdTile<D>;
    if (blocks > 0)
        return fl_fail(err, FL_BAD_INPUT, "stage 14 (cuda): variants wgmma-only and wgmma-tma launch a block per "
                       "query tile; --blocks does not apply to them");
    CUtensorMap mq, mk, mv; // used by LOAD_TMA only, made for both (the kernel takes them)
    int rc = map_tiles<D>({{&mq, a.q, heads, a.Tq, T::ROWS}, {&mk, a.k, kv_heads, a.Tk, T::BC},
                           {&mv, a.v, kv_heads, a.Tk, T::BC}}, err);
    if (rc == FL_OK)
        rc = allow_smem(hopper_forward_inline_kernel<D, LOAD>, FwdSmem<D>::BYTES, "hopper_forward_inline_kernel", err);
    if (rc != FL_OK)
        return rc;
    const long long n_work = (long long)ceil_div(a.Tq, T::BR) * heads;
    if (n_work > INT_MAX)
        return fl_fail(err, FL_UNSUPPORTED, "stage 14 (cuda): %lld query tiles; the grid numbers them with 32-bit ints",
                       n_work);
    hopper_forward_inline_kernel<D, LOAD><<<(unsigned)n_work, inline_threads<D>(), FwdSmem<D>::BYTES>>>(mq, mk, mv, a);
    return fl_cuda_launch_status("hopper_forward_inline_kernel", err);
}

template <int D> int backward_launch(const TcArgs &a, int heads, int kv_heads, FlError *err)
{
    using T = WgBwdTile<D>;
    const long long rows = (long long)heads * a.Tq;
    bwd_d_kernel<D><<<(unsigned)((rows + 7) / 8), 256>>>(a.dO, a.o, a.D, rows, a.hbm);
    int rc = fl_cuda_launch_status("bwd_d_kernel", err);
    CUtensorMap mq, mdo, mk, mv; // q, dO (B Hq, Tq, D) in boxes of BR rows; k, v (B Hkv, Tk, D) of BC
    if (rc == FL_OK)
        rc = map_tiles<D>({{&mq, a.q, heads, a.Tq, T::BR}, {&mdo, a.dO, heads, a.Tq, T::BR},
                           {&mk, a.k, kv_heads, a.Tk, T::BC}, {&mv, a.v, kv_heads, a.Tk, T::BC}}, err);
    if (rc == FL_OK)
        rc = allow_smem(hopper_backward_kernel<D>, WgBwdSmem<D>::BYTES, "hopper_backward_kernel", err);
    if (rc != FL_OK)
        return rc;
    const dim3 grid((unsigned)ceil_div(a.Tk, T::BC), (unsigned)kv_heads);
    hopper_backward_kernel<D><<<grid, T::NT, WgBwdSmem<D>::BYTES>>>(mq, mdo, mk, mv, a);
    return fl_cuda_launch_status("hopper_backward_kernel", err);
}

} // namespace

// ---- host side -----------------------------------------------------------------------------------

// The runner checks head_dims and makes the bf16 copies; a caller that skipped it gets a message.
// The kernels are built for sm_90a only: on any other GPU, say so (exit 77, CTest's skip) rather
// than fail to launch.
static int hopper_device(FlError *err)
{
    int dev = 0, major = 0, minor = 0;
    int rc = fl_cuda_status(cudaGetDevice(&dev), "cudaGetDevice", err);
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "cudaDeviceGetAttribute", err);
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), "cudaDeviceGetAttribute", err);
    if (rc == FL_OK && (major != 9 || minor != 0))
        return fl_fail(err, FL_NO_DEVICE, "stage 14 (hopper, cuda) needs a Hopper GPU (compute capability 9.0); "
                       "this one is %d.%d", major, minor);
    return rc;
}

static int tc_validate(const AttnProblem *p, int backward, FlError *err)
{
    if (p->d != p->dv || (p->d != 64 && p->d != 128))
        return fl_fail(err, FL_UNSUPPORTED,
                       "stage 14 (hopper, cuda) runs head dims d = dv in {64, 128}; this case "
                       "has d = %d, dv = %d", p->d, p->dv);
    if (!p->q_bf16 || !p->k_bf16 || !p->v_bf16 || (backward && !p->dout_bf16))
        return fl_fail(err, FL_BAD_INPUT, "stage 14 (cuda): no bf16 copies of the inputs (the runner "
                       "makes them for a bf16 stage)");
    if (p->Hkv <= 0 || p->Hq % p->Hkv != 0)
        return fl_fail(err, FL_BAD_INPUT, "stage 14 (cuda): Hq = %d is not a multiple of Hkv = %d",
                       p->Hq, p->Hkv);
    return hopper_device(err);
}

// How many heads the forward deals out together (fwd_work). Without the mask 1. With it, the query
// heads of as many kv heads as keep their K and V (Tk (d + dv) bf16 each) within 16 MiB, a third of
// an H100's or H200's L2, so that the blocks running at one time still find them there: at
// T = 4096, 16 heads at d = 64 and 8 at d = 128.
static int fwd_deal(const AttnProblem *p)
{
    if (!p->causal)
        return 1;
    const long long heads = (long long)p->B * p->Hq, group = p->Hq / p->Hkv;
    const long long kv_heads = (16LL << 20) / ((long long)p->Tk * (p->d + p->dv) * 2);
    const long long deal = (kv_heads > 1 ? kv_heads : 1) * group;
    return (int)(deal < heads ? deal : heads);
}

static TcArgs tc_args(const AttnProblem *p, AttnTensors *t, const RunCtx *ctx)
{
    TcArgs a;
    a.q = reinterpret_cast<const bf16 *>(p->q_bf16);
    a.k = reinterpret_cast<const bf16 *>(p->k_bf16);
    a.v = reinterpret_cast<const bf16 *>(p->v_bf16);
    a.dO = reinterpret_cast<const bf16 *>(p->dout_bf16);
    a.o = t->o, a.lse = t->lse, a.dQ = t->dq, a.dK = t->dk, a.dV = t->dv;
    a.D = (float *)ctx->workspace;         // the backward's
    a.next_tile = (int *)ctx->workspace; // the forward's
    a.Tq = p->Tq, a.Tk = p->Tk, a.Hq = p->Hq, a.group = p->Hq / p->Hkv;
    a.deal = fwd_deal(p);
    a.causal = p->causal;
    a.scale = p->scale, a.scale_log2 = p->scale * kLog2e;
    a.hbm = ctx->hbm_dev;
    return a;
}

template <int HIDE, Grid GRID> static int tc_forward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    int rc = tc_validate(p, 0, err);
    if (rc != FL_OK || p->Tq <= 0 || p->Tk <= 0 || p->B <= 0 || p->Hq <= 0)
        return rc;
    const TcArgs a = tc_args(p, t, ctx);
    return p->d == 64 ? forward_launch<64, HIDE>(a, p->B * p->Hq, p->B * p->Hkv, GRID, ctx->blocks, err)
                      : forward_launch<128, HIDE>(a, p->B * p->Hq, p->B * p->Hkv, GRID, ctx->blocks, err);
}

template <int LOAD> static int tc_forward_inline(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    int rc = tc_validate(p, 0, err);
    if (rc != FL_OK || p->Tq <= 0 || p->Tk <= 0 || p->B <= 0 || p->Hq <= 0)
        return rc;
    const TcArgs a = tc_args(p, t, ctx);
    return p->d == 64 ? forward_inline_launch<64, LOAD>(a, p->B * p->Hq, p->B * p->Hkv, ctx->blocks, err)
                      : forward_inline_launch<128, LOAD>(a, p->B * p->Hq, p->B * p->Hkv, ctx->blocks, err);
}

// The workspace: the forward's work counter; the backward's D = rowsum(dO ∘ O) (B, Hq, Tq).
static size_t tc_workspace_bytes(const AttnProblem *p, const RunCtx *ctx, Direction dir)
{
    (void)ctx;
    return dir == DIR_BWD ? (size_t)p->B * p->Hq * p->Tq * sizeof(float) : sizeof(int);
}

// dq = 0 (the kernel adds into it), then D and the backward kernel for the head dim.
static int tc_backward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    int rc = tc_validate(p, 1, err);
    if (rc != FL_OK || p->Tq <= 0 || p->Tk <= 0 || p->B <= 0 || p->Hq <= 0)
        return rc;
    const TcArgs a = tc_args(p, t, ctx);
    const size_t dq_bytes = (size_t)p->B * p->Hq * p->Tq * p->d * sizeof(float);
    rc = fl_cuda_status(cudaMemsetAsync(t->dq, 0, dq_bytes), "zeroing dq", err); // atomics add into it
    if (rc == FL_OK)
        rc = hbm_dev_add_from_host(a.hbm, 0, dq_bytes, err);
    if (rc != FL_OK)
        return rc;
    return p->d == 64 ? backward_launch<64>(a, p->B * p->Hq, p->B * p->Hkv, err)
                      : backward_launch<128>(a, p->B * p->Hq, p->B * p->Hkv, err);
}

// The stage, its forward with a block per query tile, and its forward with one or both ways of
// hiding the softmax left out (the ablation); the backward is the stage's in every variant.
template <int HIDE, Grid GRID = GRID_PER_SM>
static constexpr StageImpl tc_cuda_impl(const char *variant, const char *what)
{
    return {"14", "hopper", variant, DEVICE_CUDA, what, FEAT_BACKWARD | FEAT_CAUSAL | FEAT_GQA, tc_forward<HIDE, GRID>,
            tc_backward, tc_workspace_bytes, NULL, PRECISION_BF16, {64, 128}};
}
static const StageImpl tc_cuda = tc_cuda_impl<HIDE_BOTH>("",
    "FA on Hopper, bf16: a TMA producer warpgroup, mbarriers, wgmma consumer warpgroups, forward and backward");
static const StageImpl tc_cuda_per_tile = tc_cuda_impl<HIDE_BOTH, GRID_PER_TILE>("per-tile",
    "the forward with a block per query tile instead of a persistent grid of one block per SM");
static const StageImpl tc_cuda_no_pingpong = tc_cuda_impl<HIDE_IN_WARPGROUP>("no-pingpong",
    "the forward without ping-pong: the consumer warpgroups do not take turns (ablation)");
static const StageImpl tc_cuda_no_overlap = tc_cuda_impl<HIDE_PINGPONG>("no-overlap",
    "the forward without the overlap inside a warpgroup: P V finishes before the softmax (ablation)");
static const StageImpl tc_cuda_serial = tc_cuda_impl<HIDE_NONE>("serial",
    "the forward with neither ping-pong nor the overlap inside a warpgroup (ablation)");
// The ablation's first rungs: a block per query tile, every warpgroup a serial consumer, the ring
// filled by cp.async (wgmma alone) or by one thread's TMA (wgmma + TMA, no warp specialization).
template <int LOAD> static constexpr StageImpl tc_cuda_inline_impl(const char *variant, const char *what)
{
    return {"14", "hopper", variant, DEVICE_CUDA, what, FEAT_BACKWARD | FEAT_CAUSAL | FEAT_GQA, tc_forward_inline<LOAD>,
            tc_backward, tc_workspace_bytes, NULL, PRECISION_BF16, {64, 128}};
}
static const StageImpl tc_cuda_wgmma_only = tc_cuda_inline_impl<LOAD_CP_ASYNC>("wgmma-only",
    "the forward with wgmma alone: every warpgroup computes and copies with cp.async, a block barrier a tile (ablation)");
static const StageImpl tc_cuda_wgmma_tma = tc_cuda_inline_impl<LOAD_TMA>("wgmma-tma",
    "the forward with wgmma and TMA but no producer warpgroup: one thread copies, a block barrier a tile (ablation)");

extern "C" const StageImpl *const stage14_hopper_cuda[] = {&tc_cuda, &tc_cuda_per_tile, &tc_cuda_no_pingpong,
                                                          &tc_cuda_no_overlap, &tc_cuda_serial,
                                                          &tc_cuda_wgmma_only, &tc_cuda_wgmma_tma, NULL};
