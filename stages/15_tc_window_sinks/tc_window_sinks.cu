/* stages/15_tc_window_sinks/tc_window_sinks.cu — stage 12's tensor-core kernels (bf16 inputs,
 * float32 accumulation, head dims 64 and 128, GQA) with stage 10's sliding window, sink tokens and
 * learned sinks, forward and backward with dsinks. Its parent is stage 12 (`flashlab diff 15`).
 *
 * reference.c fixes what it must compute; `flashlab check 15 --device cuda` checks it against the
 * golden cases.
 *
 * New in stage 15 (tiles.h holds the mask both sides use):
 *   - the mask: row i sees the band [lo, hi) and the sink tokens [0, se) (tc_row_runs); inside a
 *     tile it is no longer a prefix of the keys, so a masked tile tests each key (tc_sees);
 *   - the forward walks only the sink tiles and the band (tc_next_key_tile), the backward only the
 *     query tiles whose rows reach its key tile (tc_rows_seeing): O(T (W + S)) work, not O(T^2);
 *   - the learned sink joins each row's softmax once, after the walk (join_sink), so P and its
 *     rounding inside the walk are stage 12's; lse includes the sink;
 *   - dsinks_h = -sum P_sink D is summed in the pass that forms D (bwd_d_kernel).
 *
 * What follows is stage 12's description of the kernels.
 *
 * The algorithm is stages 07 and 08's: Q tiles outer in the forward with the online softmax in
 * base 2, K/V tiles outer in the backward with D = rowsum(dO ∘ O), P recomputed from the saved
 * lse, dK/dV summed in registers over every query head of the group, dQ summed in HBM with
 * atomics. What changes is who multiplies: every product is a sequence of warp-wide
 * mma.sync m16n8k16 instructions (common/mma.cuh), each 4096 multiply-adds of bf16 pairs, instead
 * of one float32 FFMA per thread. That changes the shape of the kernel:
 *   - a warp, not a thread, owns a 16-row slice of a tile, and each lane holds the fixed pieces
 *     ("fragments") of the 16 x 8 accumulator tiles that the instruction defines;
 *   - shared-memory tiles are bf16 and swizzled so that ldmatrix reads them without bank conflicts;
 *   - the scores stay in registers: the C fragments of S = Q K^T become, after the softmax and a
 *     round to bf16, the A fragments of O += P V (a_from_c), with no trip through shared memory.
 * The runner hands the stage bf16 copies of q, k, v, dO (AttnProblem.q_bf16 ...; made outside the
 * timed region); o, lse and the gradients are written in float32.
 *
 * Rounding happens at four places, the same ones this stage's CPU reference (reference.c) uses:
 * the inputs, P before P V, P before dV = P^T dO, and dS before dK = dS^T Q and dQ = dS K. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "attn.h"
#include "cuda_util.h"
#include "error.h"
#include "mma.cuh"
#include "tiles.h"

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct TcArgs {
    const bf16 *q, *k, *v, *dO;  // bf16 inputs (B, Hq|Hkv, T, D)
    const float *sinks;          // learned sink logits (Hq), or NULL
    float *o, *lse;              // forward outputs; read back by the backward
    float *dQ, *dK, *dV, *D;     // gradients; D = rowsum(dO ∘ O) in the workspace
    float *dsinks;               // (Hq), with sinks
    int Tq, Tk, Hq, group;       // group = Hq / Hkv
    TcMask mask;                 // causal, window W, sink tokens S (tiles.h)
    float scale, scale_log2;     // scale * log2(e): scores live in base 2
    unsigned long long *hbm;     // [read, written] or NULL
};

// Key j is hidden from query row i (outside its band and sink tokens, or a key/row past the end of
// a short tile).
__device__ __forceinline__ bool hidden(const TcArgs &a, int i, int j)
{
    return i >= a.Tq || j >= a.Tk || !tc_sees(tc_row_runs(a.mask, i), j);
}

// ==== the forward pass ===========================================================================
//
// One block of NT = 32 * BR / 16 threads per query tile Q_i (BR rows) of one head; warp w owns
// rows 16w .. 16w+15 of the tile. Per K/V tile j (BC keys), warp w computes
//   S = Q_i K_j^T    (16, BC)   as BC/8 accumulator tiles s[n] (keys 8n .. 8n+7)
//   the online softmax of its 16 rows (each lane holds rows g and g+8: two running maxima)
//   O += P V_j       (16, D)    as D/8 accumulator tiles o[n]
// Shared memory (bf16, swizzled): Q_i (BR, D) and two stages of K_j, V_j (BC, D): the K/V tiles
// of step j+1 stream in with cp.async while step j computes.
template <int D> struct FwdTile {
    static constexpr int BR = TC_BLOCK_R, BC = TC_BLOCK_C, WARPS = BR / 16, NT = 32 * WARPS;
    static constexpr int NS = BC / 8, NO = D / 8; // accumulator tiles of S and of O per warp
    // Q_i's fragments stay in registers for the whole walk (loaded in the first step) at d = 128:
    // 8 % faster there (H100, T = 4096). At d = 64 they are read again every step: holding them
    // takes the kernel from 128 to 146 registers, one block per SM instead of two.
    static constexpr bool Q_IN_REGS = D == 128;
    static constexpr size_t SMEM_BYTES = (size_t)(BR + 4 * BC) * D * sizeof(bf16);
};

// K_j and V_j (rows from key kv0 of kv head kvh) into stage `buf`.
template <int D>
__device__ __forceinline__ void load_kv_tile(bf16 *Ks, bf16 *Vs, const TcArgs &a, size_t kv_row0,
                                             int kv0, int tid)
{
    using T = FwdTile<D>;
    const int rows = min(T::BC, a.Tk - kv0);
    load_tile_swizzled<T::BC, D, T::NT>(Ks, a.k + (kv_row0 + kv0) * D, rows, tid);
    load_tile_swizzled<T::BC, D, T::NT>(Vs, a.v + (kv_row0 + kv0) * D, rows, tid);
    cp_async_commit();
    if (tid == 0)
        hbm_dev_add(a.hbm, HBM_READ, (unsigned long long)rows * 2 * D * sizeof(bf16));
}

// The learned sink joins one row's softmax after its walk: one more score s2 = s_h log2(e) with a
// zero value row. With the row's max m and sum l (base 2): m' = max(m, s2), l' = exp2(m - m') l +
// exp2(s2 - m'); returns exp2(m - m'), the factor Õ takes to share l's new reference. m and l
// become m', l' (shift by 0 when m' = -inf, so that l' stays 0 rather than NaN).
__device__ __forceinline__ float join_sink(float &m, float &l, float s2)
{
    /* exercise: begin — the learned sink joins the softmax of one row after its walk: m' = max(m, s2), l' = exp2(m - m') l + exp2(s2 - m') with a shift of 0 when m' = -inf; return exp2(m - m'); m and l become m', l' (check 15 --device cuda: o and lse of the tc_*sinks* cases) | stub: (void)s2; return 1.0f; */
    const float m_new = fmaxf(m, s2);
    const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
    const float o_scale = exp2f(m - m_ref);
    l = o_scale * l + exp2f(s2 - m_ref);
    m = m_new;
    return o_scale;
    /* exercise: end */
}

// (Two blocks per SM at d = 64, as in stage 12: the mask's runs must not push the kernel past 128
// registers.)
template <int D>
__global__ void __launch_bounds__(FwdTile<D>::NT, D == 64 ? 2 : 1) tc_forward_kernel(TcArgs a)
{
    using T = FwdTile<D>;
    extern __shared__ uint4 smem16[]; // 16-byte aligned, as cp.async and ldmatrix need
    bf16 *Qs = reinterpret_cast<bf16 *>(smem16); // Q_i (BR, D)
    bf16 *Ks = Qs + T::BR * D;                   // K_j (BC, D), two stages
    bf16 *Vs = Ks + 2 * T::BC * D;               // V_j (BC, D), two stages

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
    // grid (heads, query tiles), query tiles in reverse: with a causal mask the longest walks
    // (the last query tiles) start first, as in stage 07
    const int bh = blockIdx.x, h = bh % a.Hq, b = bh / a.Hq;
    const int kvh = b * (a.Hq / a.group) + h / a.group;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * T::BR, rows_q = min(T::BR, a.Tq - q0);
    const size_t q_row0 = (size_t)bh * a.Tq + q0, kv_row0 = (size_t)kvh * a.Tk;
    // The K/V walk: the sink tiles, then the band from the tile holding the first row's lowest
    // key to the last row's last key (tiles.h); the tiles between and past them are never loaded.
    const TcRuns first = tc_row_runs(a.mask, q0), last = tc_row_runs(a.mask, q0 + rows_q - 1);
    const int kv_first = tc_next_key_tile(first, last, 0), kv_end = last.hi;

    load_tile_swizzled<T::BR, D, T::NT>(Qs, a.q + q_row0 * D, rows_q, tid);
    if (tid == 0)
        hbm_dev_add(a.hbm, HBM_READ, (unsigned long long)rows_q * D * sizeof(bf16));
    if (kv_first < kv_end)
        load_kv_tile<D>(Ks, Vs, a, kv_row0, kv_first, tid); // one commit group: Q_i, first K, V
    else
        cp_async_commit();

    // This lane's rows of the tile: r[0] = 16 warp + g and r[1] = r[0] + 8.
    const int r[2] = {q0 + 16 * warp + g, q0 + 16 * warp + g + 8};
    float o[T::NO][4]; // Õ, unnormalised
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}; // running max (base 2), partial sums
#pragma unroll
    for (int n = 0; n < T::NO; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

    uint32_t qa[T::Q_IN_REGS ? D / 16 : 1][4]; // the warp's Q_i rows as A fragments
    for (int j = 0, kv0 = kv_first; kv0 < kv_end; j++) {
        const int kv_next = tc_next_key_tile(first, last, kv0 + T::BC);
        if (kv_next < kv_end) { // the next tile of the walk into the other stage, then wait for this one
            load_kv_tile<D>(Ks + ((j + 1) & 1) * T::BC * D, Vs + ((j + 1) & 1) * T::BC * D, a,
                            kv_row0, kv_next, tid);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const bf16 *Kj = Ks + (j & 1) * T::BC * D, *Vj = Vs + (j & 1) * T::BC * D;

        // S = Q_i K_j^T   (16, BC) per warp: d/16 steps of k, two key tiles per ldmatrix
        float s[T::NS][4];
#pragma unroll
        for (int n = 0; n < T::NS; n++)
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D; kk += 16) {
            uint32_t qf[4]; // Q_i's A fragment for columns kk .. kk+15
            if (T::Q_IN_REGS) {
                if (j == 0)
                    load_a<D>(qa[kk / 16], Qs, 16 * warp, kk, lane);
#pragma unroll
                for (int x = 0; x < 4; x++)
                    qf[x] = qa[kk / 16][x];
            } else {
                load_a<D>(qf, Qs, 16 * warp, kk, lane);
            }
#pragma unroll
            for (int n = 0; n < T::NS; n += 2) {
                uint32_t kb[4];
                load_b_pair<D>(kb, Kj, 8 * n, kk, lane);
                mma_bf16(s[n], qf, kb[0], kb[1]);
                mma_bf16(s[n + 1], qf, kb[2], kb[3]);
            }
        }

        // Online softmax in base 2 over this lane's two rows (element e of s[n]: row r[e / 2],
        // key kv0 + 8n + 2 t4 + e % 2). Only tiles that reach past the first row's last key or
        // below the last row's band (a sink tile, or the band's lower edge) are masked.
        const bool masked = kv0 + T::BC > a.Tk || (a.mask.causal && kv0 + T::BC - 1 > q0 + a.Tk - a.Tq) ||
                            kv0 < last.lo;
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            float mx = -INFINITY;
#pragma unroll
            for (int n = 0; n < T::NS; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float x = s[n][2 * rr + e] * a.scale_log2;
                    if (masked && hidden(a, r[rr], kv0 + 8 * n + 2 * t4 + e))
                        x = -INFINITY;
                    s[n][2 * rr + e] = x;
                    mx = fmaxf(mx, x);
                }
            const float m_new = fmaxf(m[rr], row_max<4>(mx));
            const float m_use = m_new == -INFINITY ? 0.0f : m_new; // a row with no key yet: P = 0
            const float alpha = exp2f(m[rr] - m_use);
            float rowsum = 0.0f;
#pragma unroll
            for (int n = 0; n < T::NS; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float p = exp2f(s[n][2 * rr + e] - m_use);
                    s[n][2 * rr + e] = p;
                    rowsum += p;
                }
            l[rr] = l[rr] * alpha + rowsum; // P summed in float32, before rounding
            m[rr] = m_new;
#pragma unroll
            for (int n = 0; n < T::NO; n++) {
                o[n][2 * rr] *= alpha;
                o[n][2 * rr + 1] *= alpha;
            }
        }

        // O += P V_j   (16, D): P leaves the S accumulators as bf16 A fragments (a_from_c)
#pragma unroll
        for (int kc = 0; kc < T::NS; kc += 2) {
            uint32_t pa[4];
            a_from_c(pa, s[kc], s[kc + 1]);
#pragma unroll
            for (int n = 0; n < T::NO; n += 2) {
                uint32_t vb[4];
                load_b_pair_trans<D>(vb, Vj, 8 * n, 8 * kc, lane);
                mma_bf16(o[n], pa, vb[0], vb[1]);
                mma_bf16(o[n + 1], pa, vb[2], vb[3]);
            }
        }
        __syncthreads(); // this stage's K_j, V_j are free for step j + 2
        kv0 = kv_next;
    }
    cp_async_wait<0>(); // (a tile with no key never waited for its Q tile)

    // The learned sink joins each row's softmax (join_sink), then O = o_scale Õ / l and
    // lse = (m + log2 l) ln 2; a row that saw no key has Õ = 0: o = 0, and lse = -inf without
    // sinks (l = 0), s_h with them (l = 1)
    const float sink2 = a.sinks ? a.sinks[h] * kLog2e : -INFINITY;
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        float lsum = row_sum<4>(l[rr]);
        const float o_scale = a.sinks ? join_sink(m[rr], lsum, sink2) : 1.0f;
        if (r[rr] >= a.Tq)
            continue;
        const float inv = lsum != 0.0f ? o_scale / lsum : 0.0f; // a NaN l is not an empty row
        float *orow = a.o + ((size_t)bh * a.Tq + r[rr]) * D;
#pragma unroll
        for (int n = 0; n < T::NO; n++)
            *reinterpret_cast<float2 *>(orow + 8 * n + 2 * t4) =
                make_float2(o[n][2 * rr] * inv, o[n][2 * rr + 1] * inv);
        if (t4 == 0)
            a.lse[(size_t)bh * a.Tq + r[rr]] = lsum != 0.0f ? (m[rr] + log2f(lsum)) * kLn2 : -INFINITY;
    }
    if (tid == 0)
        hbm_dev_add(a.hbm, HBM_WRITTEN, (unsigned long long)rows_q * (D + 1) * sizeof(float));
}

// ==== the backward pass ==========================================================================
//
// Per head, with P = exp2(S scale log2(e) - lse log2(e)) recomputed from the saved lse:
//   D  = rowsum(dO ∘ O)      (Tq)       bwd_d_kernel, into the workspace
//   dV = P^T dO              (Tk, D)    dP = dO V^T (Tq, Tk)    dS = P ∘ (dP - D)
//   dK = scale dS^T Q        (Tk, D)    dQ = scale dS K (Tq, D)
// One block of 4 warps per K/V tile (BC = 64 keys) of one kv head; warp w owns keys 16w .. 16w+15,
// so it computes the transposed tiles S^T = K_j Q_i^T and dP^T = V_j dO_i^T (16, BR) and keeps its
// rows of dK_j and dV_j in registers while it walks every query tile of every head of the group.
// Their C fragments become the A fragments of dV += P^T dO and dK += dS^T Q directly. dQ_i needs
// the whole dS tile, so dS^T goes through shared memory once; then warp w adds rows 16w .. 16w+15
// of scale dS K_j into dQ in HBM with float32 atomics.
// Shared memory (bf16, swizzled): K_j, V_j (BC, D) once; two stages of Q_i, dO_i (BR, D) and of
// lse_i, D_i (BR floats); dS^T (BC, BR).
template <int D> struct BwdTile {
    static constexpr int BR = TC_BWD_BLOCK_R, BC = TC_BLOCK_C, WARPS = BC / 16, NT = 32 * WARPS;
    // QP: query rows per pass of a step. Two passes of 32 at d = 128 keep S^T and dP^T at 16
    // registers each beside dK and dV's 128 (one pass of 64 spills there).
    static constexpr int QP = D == 128 ? 32 : 64;
    static constexpr int NQ = QP / 8, NO = D / 8; // accumulator tiles of S^T (a pass) and of dK, dV
    static constexpr size_t SMEM_BYTES =
        (size_t)(2 * BC * D + 4 * BR * D + BC * BR) * sizeof(bf16) + 4 * BR * sizeof(float);
};

// D = rowsum(dO ∘ O), one warp per query row (dO in bf16 as the kernels read it, O in float32),
// 0 for a row that sees no key (its o is 0; a NaN in its dO must not reach dsinks). With learned
// sinks the same pass sums dsinks_h = -sum over the rows of P_sink D, P_sink = exp2(s_h log2(e) -
// lse log2(e)) (lse includes the sink): a block holds D_ROWS rows of one head (grid: row blocks,
// heads) and adds their share with one atomic.
constexpr int D_ROWS = 64, D_WARPS = 8;

template <int D> __global__ void __launch_bounds__(32 * D_WARPS) bwd_d_kernel(TcArgs a)
{
    __shared__ float share[D_WARPS];
    const int bh = blockIdx.y, h = bh % a.Hq, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int i0 = blockIdx.x * D_ROWS, rows = min(D_ROWS, a.Tq - i0);
    float sink_share = 0.0f; // this warp's rows' -P_sink D (lane 0)
    for (int i = i0 + warp; i < i0 + rows; i += D_WARPS) {
        const size_t row = (size_t)bh * a.Tq + i;
        float acc = 0.0f;
        if (tc_visible(tc_row_runs(a.mask, i)) > 0)
#pragma unroll
            for (int c = lane; c < D; c += 32)
                acc = fmaf(__bfloat162float(a.dO[row * D + c]), a.o[row * D + c], acc);
        acc = row_sum<32>(acc);
        if (lane == 0) {
            a.D[row] = acc;
            if (a.sinks)
                /* exercise: begin — dsinks: row `row` of head h adds -P_sink D to this warp's share, P_sink = exp2(s_h log2(e) - lse log2(e)) from the forward's lse (check 15 --device cuda: dsinks.npy of the tc_*sinks* backward cases) | stub: sink_share += 0.0f; */
                sink_share -= exp2f((a.sinks[h] - a.lse[row]) * kLog2e) * acc;
                /* exercise: end */
        }
    }
    if (threadIdx.x == 0) {
        const unsigned long long lse_bytes = a.sinks ? sizeof(float) : 0;
        hbm_dev_add(a.hbm, HBM_READ, (unsigned long long)rows * (D * (sizeof(bf16) + sizeof(float)) + lse_bytes));
        hbm_dev_add(a.hbm, HBM_WRITTEN, (unsigned long long)rows * sizeof(float));
    }
    if (!a.sinks)
        return;
    if (lane == 0)
        share[warp] = sink_share;
    __syncthreads();
    if (threadIdx.x == 0) {
        float sum = 0.0f;
        for (int w = 0; w < D_WARPS; w++)
            sum += share[w];
        atomicAdd(a.dsinks + h, sum);
    }
}

// The shared-memory tiles of one backward block.
template <int D> struct BwdSmem {
    using T = BwdTile<D>;
    bf16 *Ks, *Vs, *Qs, *dOs, *dSTs; // Qs, dOs: two stages each
    float *Ls, *Ds;                  // lse_i, D_i: two stages each
    __device__ explicit BwdSmem(void *base)
    {
        Ks = reinterpret_cast<bf16 *>(base); // K_j   (BC, D)
        Vs = Ks + T::BC * D;                 // V_j   (BC, D)
        Qs = Vs + T::BC * D;                 // Q_i   (BR, D) x 2
        dOs = Qs + 2 * T::BR * D;            // dO_i  (BR, D) x 2
        dSTs = dOs + 2 * T::BR * D;          // dS^T  (BC, BR)
        Ls = reinterpret_cast<float *>(dSTs + T::BC * T::BR); // lse_i (BR) x 2
        Ds = Ls + 2 * T::BR;                                  // D_i   (BR) x 2
    }
};

// Q_i, dO_i, lse_i, D_i of query tile q0 of head hq into stage `st`.
template <int D>
__device__ __forceinline__ void load_query_tile(const BwdSmem<D> &sm, const TcArgs &a, int st,
                                                int hq, int q0, int tid)
{
    using T = BwdTile<D>;
    const int rows = min(T::BR, a.Tq - q0);
    const size_t row0 = (size_t)hq * a.Tq + q0;
    load_tile_swizzled<T::BR, D, T::NT>(sm.Qs + st * T::BR * D, a.q + row0 * D, rows, tid);
    load_tile_swizzled<T::BR, D, T::NT>(sm.dOs + st * T::BR * D, a.dO + row0 * D, rows, tid);
    load_vector<T::BR, T::NT>(sm.Ls + st * T::BR, a.lse + row0, rows, tid);
    load_vector<T::BR, T::NT>(sm.Ds + st * T::BR, a.D + row0, rows, tid);
    cp_async_commit();
    if (tid == 0)
        hbm_dev_add(a.hbm, HBM_READ,
                    (unsigned long long)rows * (2 * D * sizeof(bf16) + 2 * sizeof(float)));
}

// The query tiles a key tile meets, as a flat walk over (head of the group, query tile): only
// the tiles that hold a row seeing a key of [kv0, kv0 + n) (tc_rows_seeing: from the diagonal to
// where the band leaves the tile, to the end when the tile holds a sink token).
struct QueryWalk {
    int first_tile, tiles_per_head, steps;
    __device__ QueryWalk(const TcArgs &a, int kv0, int n, int br)
    {
        int first_row, end_row;
        tc_rows_seeing(a.mask, kv0, n, &first_row, &end_row);
        first_tile = first_row / br;
        tiles_per_head = first_row < end_row ? ceil_div(end_row, br) - first_tile : 0;
        steps = tiles_per_head * a.group;
    }
    __device__ int head(int step, int hq0) const { return hq0 + step / tiles_per_head; }
    __device__ int tile(int step) const { return first_tile + step % tiles_per_head; }
};

template <int D>
__global__ void __launch_bounds__(BwdTile<D>::NT) tc_backward_kernel(TcArgs a)
{
    using T = BwdTile<D>;
    extern __shared__ uint4 smem16[];
    const BwdSmem<D> sm(smem16);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
    // grid (key tiles, kv heads): the blocks running together share a head, so its Q and dO tiles,
    // which every block of the head streams, are served from L2 (heads in x, as in the forward,
    // measured 1.4x slower at T = 16384)
    const int kvbh = blockIdx.y, hkv = kvbh % (a.Hq / a.group), b = kvbh / (a.Hq / a.group);
    const int hq0 = b * a.Hq + hkv * a.group; // first query head (b, h) of the group, flattened
    const int kv0 = blockIdx.x * T::BC, rows_kv = min(T::BC, a.Tk - kv0);
    const size_t kv_row0 = (size_t)kvbh * a.Tk + kv0;
    const QueryWalk walk(a, kv0, rows_kv, T::BR);

    if (walk.steps > 0) { // K_j, V_j once; a tile no row sees is never loaded (dK_j = dV_j = 0)
        load_tile_swizzled<T::BC, D, T::NT>(sm.Ks, a.k + kv_row0 * D, rows_kv, tid);
        load_tile_swizzled<T::BC, D, T::NT>(sm.Vs, a.v + kv_row0 * D, rows_kv, tid);
        if (tid == 0)
            hbm_dev_add(a.hbm, HBM_READ, (unsigned long long)rows_kv * 2 * D * sizeof(bf16));
        load_query_tile<D>(sm, a, 0, walk.head(0, hq0), walk.tile(0) * T::BR, tid);
    } else {
        cp_async_commit();
    }

    // This lane's keys: key[0] = kv0 + 16 warp + g, key[1] = key[0] + 8 (rows of S^T, dK, dV).
    const int key[2] = {kv0 + 16 * warp + g, kv0 + 16 * warp + g + 8};
    float dk[T::NO][4], dv[T::NO][4];
#pragma unroll
    for (int n = 0; n < T::NO; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            dk[n][e] = dv[n][e] = 0.0f;

    for (int step = 0; step < walk.steps; step++) {
        const int st = step & 1, hq = walk.head(step, hq0), q0 = walk.tile(step) * T::BR;
        if (step + 1 < walk.steps) { // the next query tile streams in while this one computes
            load_query_tile<D>(sm, a, st ^ 1, walk.head(step + 1, hq0),
                               walk.tile(step + 1) * T::BR, tid);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const bf16 *Qi = sm.Qs + st * T::BR * D, *dOi = sm.dOs + st * T::BR * D;
        const float *Li = sm.Ls + st * T::BR, *Di = sm.Ds + st * T::BR;

        // masked: some pair of the step is hidden (past a row's last key, below the last row's
        // band, or a short tile)
        const bool masked = kv0 + T::BC > a.Tk || q0 + T::BR > a.Tq ||
                            (a.mask.causal && kv0 + T::BC - 1 > q0 + a.Tk - a.Tq) ||
                            kv0 < tc_row_runs(a.mask, q0 + T::BR - 1).lo;
        // In passes of QP query rows (fewer live accumulators; see BwdTile::QP):
#pragma unroll 1
        for (int qp = 0; qp < T::BR; qp += T::QP) {
            // S^T = K_j Q_i^T and dP^T = V_j dO_i^T   (16, QP) per warp
            float s[T::NQ][4], dp[T::NQ][4];
#pragma unroll
            for (int n = 0; n < T::NQ; n++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    s[n][e] = dp[n][e] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < D; kk += 16) {
                uint32_t ka[4], va[4];
                load_a<D>(ka, sm.Ks, 16 * warp, kk, lane);
                load_a<D>(va, sm.Vs, 16 * warp, kk, lane);
#pragma unroll
                for (int n = 0; n < T::NQ; n += 2) {
                    uint32_t qb[4], ob[4];
                    load_b_pair<D>(qb, Qi, qp + 8 * n, kk, lane);
                    mma_bf16(s[n], ka, qb[0], qb[1]);
                    mma_bf16(s[n + 1], ka, qb[2], qb[3]);
                    load_b_pair<D>(ob, dOi, qp + 8 * n, kk, lane);
                    mma_bf16(dp[n], va, ob[0], ob[1]);
                    mma_bf16(dp[n + 1], va, ob[2], ob[3]);
                }
            }

            // P^T = exp2(S^T scale log2(e) - lse log2(e)),  dS^T = P^T ∘ (dP^T - D)   (element e
            // of tile n: key key[e / 2], query row q0 + qp + 8n + 2 t4 + e % 2). s becomes P^T,
            // dp becomes dS^T.
#pragma unroll
            for (int n = 0; n < T::NQ; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int c = qp + 8 * n + 2 * t4 + (e & 1); // query row within the tile
                    const float lse = Li[c];
                    // a row that saw no key (lse = -inf) has P = 0 for every key: the mask covers it
                    float p = exp2f(s[n][e] * a.scale_log2 - lse * kLog2e);
                    if (masked && hidden(a, q0 + c, key[e >> 1]))
                        p = 0.0f;
                    s[n][e] = p;
                    dp[n][e] = p * (dp[n][e] - Di[c]);
                }

            // dV_j += P^T dO_i and dK_j += dS^T Q_i   (16, D): P^T and dS^T as bf16 A fragments
#pragma unroll
            for (int kc = 0; kc < T::NQ; kc += 2) {
                uint32_t pa[4], dsa[4];
                a_from_c(pa, s[kc], s[kc + 1]);
                a_from_c(dsa, dp[kc], dp[kc + 1]);
#pragma unroll
                for (int n = 0; n < T::NO; n += 2) {
                    uint32_t ob[4], qb[4];
                    load_b_pair_trans<D>(ob, dOi, 8 * n, qp + 8 * kc, lane);
                    mma_bf16(dv[n], pa, ob[0], ob[1]);
                    mma_bf16(dv[n + 1], pa, ob[2], ob[3]);
                    load_b_pair_trans<D>(qb, Qi, 8 * n, qp + 8 * kc, lane);
                    mma_bf16(dk[n], dsa, qb[0], qb[1]);
                    mma_bf16(dk[n + 1], dsa, qb[2], qb[3]);
                }
            }

            // dS^T (BC, BR) to shared memory as bf16, for dQ
#pragma unroll
            for (int n = 0; n < T::NQ; n++)
#pragma unroll
                for (int rr = 0; rr < 2; rr++) {
                    const int row = 16 * warp + g + 8 * rr;
                    *reinterpret_cast<uint32_t *>(sm.dSTs + swizzle<T::BR>(row, qp + 8 * n) + 2 * t4) =
                        pack_bf16(dp[n][2 * rr], dp[n][2 * rr + 1]);
                }
        }
        __syncthreads();

        // dQ_i += scale dS K_j   (BR, D): warp w adds query rows 16w .. 16w+15, 16 columns at a time
        uint32_t dsa[T::BC / 16][4]; // dS rows 16w.., all BC keys, as A fragments (from dS^T)
#pragma unroll
        for (int kc = 0; kc < T::BC / 16; kc++)
            load_a_trans<T::BR>(dsa[kc], sm.dSTs, 16 * warp, 16 * kc, lane);
        const int qr[2] = {q0 + 16 * warp + g, q0 + 16 * warp + g + 8};
#pragma unroll
        for (int n = 0; n < T::NO; n += 2) {
            float dq[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
            for (int kc = 0; kc < T::BC / 16; kc++) {
                uint32_t kb[4];
                load_b_pair_trans<D>(kb, sm.Ks, 8 * n, 16 * kc, lane);
                mma_bf16(dq[0], dsa[kc], kb[0], kb[1]);
                mma_bf16(dq[1], dsa[kc], kb[2], kb[3]);
            }
#pragma unroll
            for (int half = 0; half < 2; half++)
#pragma unroll
                for (int rr = 0; rr < 2; rr++)
                    if (qr[rr] < a.Tq)
                        atomic_add_pair(a.dQ + ((size_t)hq * a.Tq + qr[rr]) * D + 8 * (n + half) +
                                            2 * t4,
                                        a.scale * dq[half][2 * rr], a.scale * dq[half][2 * rr + 1]);
        }
        if (tid == 0) {
            const unsigned long long bytes =
                (unsigned long long)min(T::BR, a.Tq - q0) * D * sizeof(float);
            hbm_dev_add(a.hbm, HBM_READ, bytes); // dQ: read-modify-write
            hbm_dev_add(a.hbm, HBM_WRITTEN, bytes);
        }
        __syncthreads(); // dS^T and this stage's Q_i, dO_i are free
    }
    cp_async_wait<0>();

    // dK_j = scale dS^T Q and dV_j: written once, float32
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        if (key[rr] >= a.Tk)
            continue;
        float *dkrow = a.dK + ((size_t)kvbh * a.Tk + key[rr]) * D;
        float *dvrow = a.dV + ((size_t)kvbh * a.Tk + key[rr]) * D;
#pragma unroll
        for (int n = 0; n < T::NO; n++) {
            *reinterpret_cast<float2 *>(dkrow + 8 * n + 2 * t4) =
                make_float2(a.scale * dk[n][2 * rr], a.scale * dk[n][2 * rr + 1]);
            *reinterpret_cast<float2 *>(dvrow + 8 * n + 2 * t4) =
                make_float2(dv[n][2 * rr], dv[n][2 * rr + 1]);
        }
    }
    if (tid == 0)
        hbm_dev_add(a.hbm, HBM_WRITTEN, (unsigned long long)rows_kv * 2 * D * sizeof(float));
}

// Launches `kernel` with `smem` bytes of dynamic shared memory (raising the per-kernel limit).
template <typename Kernel>
int launch(Kernel kernel, dim3 grid, int threads, size_t smem, const TcArgs &a, const char *name,
           FlError *err)
{
    int rc = fl_cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 (int)smem),
                            name, err);
    if (rc != FL_OK)
        return rc;
    kernel<<<grid, threads, smem>>>(a);
    return fl_cuda_launch_status(name, err);
}

template <int D> int forward_launch(const TcArgs &a, int heads, FlError *err)
{
    using T = FwdTile<D>;
    const dim3 grid((unsigned)heads, (unsigned)ceil_div(a.Tq, T::BR));
    return launch(tc_forward_kernel<D>, grid, T::NT, T::SMEM_BYTES, a, "tc_forward_kernel", err);
}

template <int D> int backward_launch(const TcArgs &a, int heads, int kv_heads, FlError *err)
{
    using T = BwdTile<D>;
    bwd_d_kernel<D><<<dim3((unsigned)ceil_div(a.Tq, D_ROWS), (unsigned)heads), 32 * D_WARPS>>>(a);
    int rc = fl_cuda_launch_status("bwd_d_kernel", err);
    if (rc != FL_OK)
        return rc;
    const dim3 grid((unsigned)ceil_div(a.Tk, T::BC), (unsigned)kv_heads);
    return launch(tc_backward_kernel<D>, grid, T::NT, T::SMEM_BYTES, a, "tc_backward_kernel", err);
}

} // namespace

// ---- host side -----------------------------------------------------------------------------------

// The runner checks head_dims and makes the bf16 copies; a caller that skipped it gets a message.
static int tc_validate(const AttnProblem *p, int backward, FlError *err)
{
    if (p->d != p->dv || (p->d != 64 && p->d != 128))
        return fl_fail(err, FL_UNSUPPORTED,
                       "stage 15 (tc_window_sinks, cuda) runs head dims d = dv in {64, 128}; this case "
                       "has d = %d, dv = %d", p->d, p->dv);
    if (!p->q_bf16 || !p->k_bf16 || !p->v_bf16 || (backward && !p->dout_bf16))
        return fl_fail(err, FL_BAD_INPUT, "stage 15 (cuda): no bf16 copies of the inputs (the runner "
                       "makes them for a bf16 stage)");
    if (p->Hkv <= 0 || p->Hq % p->Hkv != 0)
        return fl_fail(err, FL_BAD_INPUT, "stage 15 (cuda): Hq = %d is not a multiple of Hkv = %d",
                       p->Hq, p->Hkv);
    return FL_OK;
}

static TcArgs tc_args(const AttnProblem *p, AttnTensors *t, const RunCtx *ctx)
{
    TcArgs a;
    a.q = reinterpret_cast<const bf16 *>(p->q_bf16);
    a.k = reinterpret_cast<const bf16 *>(p->k_bf16);
    a.v = reinterpret_cast<const bf16 *>(p->v_bf16);
    a.dO = reinterpret_cast<const bf16 *>(p->dout_bf16);
    a.sinks = p->sinks;
    a.o = t->o, a.lse = t->lse, a.dQ = t->dq, a.dK = t->dk, a.dV = t->dv, a.dsinks = t->dsinks;
    a.D = (float *)ctx->workspace;
    a.Tq = p->Tq, a.Tk = p->Tk, a.Hq = p->Hq, a.group = p->Hq / p->Hkv;
    a.mask = {p->causal || p->window > 0, p->Tq, p->Tk, p->window, p->sink_tokens};
    a.scale = p->scale, a.scale_log2 = p->scale * kLog2e;
    a.hbm = ctx->hbm_dev;
    return a;
}

static int tc_forward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    int rc = tc_validate(p, 0, err);
    if (rc != FL_OK || p->Tq <= 0 || p->Tk <= 0 || p->B <= 0 || p->Hq <= 0)
        return rc;
    const TcArgs a = tc_args(p, t, ctx);
    return p->d == 64 ? forward_launch<64>(a, p->B * p->Hq, err)
                      : forward_launch<128>(a, p->B * p->Hq, err);
}

// D = rowsum(dO ∘ O) (B, Hq, Tq) in the workspace: the backward's only extra memory.
static size_t tc_workspace_bytes(const AttnProblem *p, const RunCtx *ctx, Direction dir)
{
    (void)ctx;
    return dir == DIR_BWD ? (size_t)p->B * p->Hq * p->Tq * sizeof(float) : 0;
}

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
    if (rc == FL_OK && p->sinks) { // dsinks too; the sink logits are read and dsinks written once
        const size_t sink_bytes = (size_t)p->Hq * sizeof(float);
        rc = fl_cuda_status(cudaMemsetAsync(t->dsinks, 0, sink_bytes), "zeroing dsinks", err);
        if (rc == FL_OK)
            rc = hbm_dev_add_from_host(a.hbm, sink_bytes, sink_bytes, err);
    }
    if (rc != FL_OK)
        return rc;
    return p->d == 64 ? backward_launch<64>(a, p->B * p->Hq, p->B * p->Hkv, err)
                      : backward_launch<128>(a, p->B * p->Hq, p->B * p->Hkv, err);
}

static const StageImpl tc_cuda = {
    "15",
    "tc_window_sinks",
    "",
    DEVICE_CUDA,
    "window + sink tokens + learned sinks in bf16 on tensor cores: band and sink tiles only, the sink "
    "joins l after the walk, dsinks in the D pass",
    FEAT_BACKWARD | FEAT_CAUSAL | FEAT_GQA | FEAT_WINDOW | FEAT_SINK_TOKENS | FEAT_SINKS,
    tc_forward,
    tc_backward,
    tc_workspace_bytes,
    NULL,
    PRECISION_BF16,
    {64, 128},
};

extern "C" const StageImpl *const stage15_tc_window_sinks_cuda[] = {&tc_cuda, NULL};
