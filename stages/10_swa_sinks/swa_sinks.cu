/* stages/10_swa_sinks/swa_sinks.cu — FlashAttention-2 with a sliding window, sink tokens and learned
 * sinks, forward and backward, as CUDA kernels, float32.
 *
 * New in stage 10: the mask of mask.h (shared with swa_sinks.c) adds a window of W keys and S
 * sink tokens: each row sees the sink run [0, se) and the window run [lo, hi). The forward's K/V
 * walk (and the deterministic dQ kernel's) visits the sink tiles, then jumps to the band
 * (next_key_tile); the K/V-tile kernel's walk over the query tiles jumps to the rows the window
 * reaches (next_tile_seeing); a tile that crosses an edge is masked key by key (sees). A
 * learned sink logit starts each row's online softmax (m = s_h, l = 1), so it joins lse but not
 * O; a last small kernel sums dsinks[h] = -sum P_sink D in a fixed order (deterministic).
 *
 * From stage 08: grouped-query attention. The group = Hq / Hkv query heads that read one kv head
 * are adjacent in memory, so their rows form one matrix of R = group * Tq packed rows (mask.h,
 * shared with swa_sinks.c: packed row r is at position r % Tq). Every kernel's "head" is now a kv head
 * and its query rows are the R packed rows: a forward block's Br rows may hold several query heads
 * (with Tq = 1, the whole group), so each K/V tile is loaded once per kv head, not once per query
 * head; the backward block that owns K_j, V_j walks the query tiles of the whole group, so dK_j and
 * dV_j are summed over the group in registers, without atomics. (The cuBLAS naive variant,
 * common/cuda_naive.cu, runs one GEMM per kv head over its R rows.) (Stage 07 read kv head h / group too, one query head per block.)
 *
 * From stage 07: the causal mask, bottom-right aligned. A block visits only the
 * tiles on or below the diagonal: the forward's K/V loop stops at the tile holding the last
 * row's position, the backward's query loop starts at the first tile that sees K_j, and only the
 * tiles that cross the diagonal mask anything. Rows that see no key give O = 0, lse = -inf and
 * zero gradients. The grids put the longest rows first. The naive variant (common/cuda_naive.cu)
 * masks P.
 * The kernels are stage 06's otherwise:
 *
 * One thread block owns one query tile Q_i (Br rows) of one head and walks over every K/V tile
 * (Bc rows) of that head. Per query row it keeps, in registers:
 *   m   the running maximum of the (log2-scaled) scores seen so far
 *   l   the running softmax denominator (each thread a partial sum of its own columns)
 *   Õ   the unnormalised output accumulator, Õ = sum_j exp2(S_ij - m) V_j
 * and only at the end divides once, O = Õ / l, and writes O and lse = m + log l to HBM once.
 *
 * The FA1 kernel of stage 04 did the opposite: K/V outer, Q inner, so every Q_i and O_i went
 * through HBM once per K/V tile. Here Q_i is read once and O_i written once.
 *
 * Threads and tiles (template parameters; one thread per micro-tile, plain FFMA, no tensor cores):
 *   TM x TN micro-tile of S per thread;   RG = Br/TM row groups, CG = Bc/TN column groups,
 *   thread tid = rg * CG + cg, so the CG threads that share a row are neighbours in one warp and
 *   reduce a row with __shfl_xor_sync. Thread (rg, cg) owns
 *     rows    rg + RG*i              (i < TM)        of S, P and O
 *     columns cg + CG*j              (j < TN)        of S and P
 *     columns 4*(CG*q + cg) + u      (q < D/(4CG))   of O, as float4.
 * Shared memory (floats, rows padded so that the warp's float4 reads hit distinct banks):
 *   Qs (Br, D+4)   Ks (Bc, D+4)   Vs (Bc, D)   Ps (Br, Bc+CG)
 * The head dims d and dv are zero-padded to D = 32, 64, 96 or 128 (one instantiation each).
 * Tiles arrive with cp.async: K_{j+1} streams in while P_j V_j runs, V_{j+1} while S_{j+1} runs.
 * The tile machinery (cp.async, load_tile, the products mma_abt / mma_ab, row reductions) is
 * common/cuda_tiles.cuh. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "attn.h"
#include "naive.h"
#include "cuda_fa2_tiles.cuh"
#include "cuda_tiles.cuh"
#include "cuda_util.h"
#include "error.h"
#include "mask.h"

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct Fa2Args {
    const float *q, *k, *v;
    float *o, *lse;
    int R, Tk, d, dv;             // R = group * Tq packed query rows per kv head
    Causal causal;
    const float *sinks;           // (Hq) learned sink logits, or NULL
    int Hq;                       // packed row g R + r belongs to query head ((g R + r) / Tq) % Hq
    float scale_log2;             // scale * log2(e): scores live in base 2
    bool vec_qk, vec_v, vec_o;
    unsigned long long *hbm;      // [read, written] or NULL
};

template <int D, int BR, int BC, int TM, int TN, int MINB>
__global__ void __launch_bounds__(Fa2Tile<D, BR, BC, TM, TN>::NT, MINB)
    fa2_forward_kernel(Fa2Args a)
{
    using T = Fa2Tile<D, BR, BC, TM, TN>;
    constexpr int RG = T::RG, CG = T::CG, NT = T::NT, OQ = T::OQ;
    extern __shared__ float4 smem4[];
    float *Qs = reinterpret_cast<float *>(smem4); // Q_i  (Br, D)
    float *Ks = Qs + BR * T::QS;                  // K_j  (Bc, D)
    float *Vs = Ks + BC * T::KS;                  // V_j  (Bc, D)
    float *Ps = Vs + BC * T::VS;                  // P_ij (Br, Bc)

    const int tid = threadIdx.x, rg = tid / CG, cg = tid % CG;
    // Grid (kv heads, query tiles of the R packed rows), tiles in reverse: with the mask on, the
    // tiles of the longest rows (the most K/V tiles) are scheduled first, the short ones last.
    const int g = blockIdx.x; // kv head b * Hkv + j; its query rows are the packed rows g * R + r
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BR;
    const int rows_q = min(BR, a.R - q0);
    const float *q = a.q + ((size_t)g * a.R + q0) * a.d;
    const float *k = a.k + (size_t)g * a.Tk * a.d;
    const float *v = a.v + (size_t)g * a.Tk * a.dv;
    // The K/V tiles holding a key some row sees: the sink tiles, then the band up to the
    // furthest row's last key (kv_end); the others are never loaded. None when no row sees a key.
    const TileRuns tile = tile_runs(a.causal, q0, rows_q);
    /* exercise: begin — forward kernel: the K/V walk of this query tile: its first tile kv_first (next_key_tile from key 0: the first sink tile, else the band) and its end kv_end (the furthest row's last key, far.hi); no tile is loaded when kv_first >= kv_end (check 10 --device cuda: o and lse of every case, and the hbm read of window_sinks_t512 equals the reference's) | stub: const int kv_end = 0, kv_first = 0; */
    const int kv_end = tile.far.hi, kv_first = next_key_tile(tile, 0, BC);
    /* exercise: end */
    // A decode step fills only R of the Br rows (R = group with Tq = 1): the threads whose rows
    // are all absent skip the two products (they still join the row reductions and barriers).
    const bool has_rows = rg < rows_q;

    // Prologue: Q_i, K_first, V_first in flight, three commit groups.
    load_tile<BR, D, T::QS, NT>(Qs, q, rows_q, a.d, a.vec_qk, tid);
    cp_async_commit();
    if (kv_first < kv_end) {
        load_tile<BC, D, T::KS, NT>(Ks, k + (size_t)kv_first * a.d, min(BC, a.Tk - kv_first), a.d,
                                    a.vec_qk, tid);
        cp_async_commit();
        load_tile<BC, D, T::VS, NT>(Vs, v + (size_t)kv_first * a.dv, min(BC, a.Tk - kv_first),
                                    a.dv, a.vec_v, tid);
    }
    cp_async_commit();
    if (tid == 0)
        hbm_dev_add(a.hbm, HBM_READ, (unsigned long long)rows_q * a.d * sizeof(float));

    float m[TM], l[TM];   // running max (base 2) and this thread's partial row sums
    float4 o[TM][OQ];     // Õ: unnormalised output rows
    zero(o);
    // With learned sinks each row starts from its sink logit as a score already seen (value 0):
    // m = s_h (base 2), l = exp2(s_h - m) = 1, counted once per row (by its cg = 0 thread).
#pragma unroll
    for (int i = 0; i < TM; i++) {
        const size_t row = (size_t)g * a.R + q0 + rg + RG * i; // packed row, all kv heads
        /* exercise: begin — forward kernel: with learned sinks each real row (rg + RG i < rows_q) starts from its query head's sink logit, in base 2: m = s_h log2(e), and l = 1 held by the row's cg == 0 thread only (row_sum adds the threads' l); without sinks m = -inf, l = 0 (check 10 --device cuda: o and lse of the *sinks* cases) | stub: m[i] = ((void)row, -INFINITY); l[i] = 0.0f; */
        const bool sink = a.sinks && rg + RG * i < rows_q;
        m[i] = sink ? a.sinks[row / a.causal.Tq % a.Hq] * kLog2e : -INFINITY;
        l[i] = sink && cg == 0 ? 1.0f : 0.0f;
        /* exercise: end */
    }

    for (int kv0 = kv_first, kv_next; kv0 < kv_end; kv0 = kv_next) {
        const int rows_kv = min(BC, a.Tk - kv0);
        kv_next = next_key_tile(tile, kv0 + BC, BC);
        cp_async_wait<1>(); // Q_i and K_j have landed (V_j may still be in flight)
        __syncthreads();
        if (tid == 0)
            hbm_dev_add(a.hbm, HBM_READ,
                        (unsigned long long)rows_kv * (a.d + a.dv) * sizeof(float));

        // S = Q_i K_j^T   (Br, Bc): this thread's TM x TN micro-tile
        float s[TM][TN];
        zero(s);
        if (has_rows)
            mma_abt<TM, TN, RG, CG, D, T::QS, T::KS>(s, Qs, Ks, rg, cg);

        // Online softmax in registers (base 2): m_new = max(m, rowmax S), P = exp2(S - m_new),
        // l = exp2(m - m_new) l + rowsum P, Õ = exp2(m - m_new) Õ. Keys a row does not see (past
        // Tk, or hidden by the mask in a tile that crosses one of its edges) get -inf.
        const bool cross = crosses(a.causal, tile, kv0, rows_kv);
#pragma unroll
        for (int i = 0; i < TM; i++) {
            const KeyRuns runs = row_runs(a.causal, cross ? q0 + rg + RG * i : 0); // used if cross
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < TN; j++) {
                const int c = cg + CG * j;
                const bool seen = c < rows_kv && (!cross || sees(runs, kv0 + c));
                const float x = seen ? s[i][j] * a.scale_log2 : -INFINITY;
                s[i][j] = x;
                mx = fmaxf(mx, x);
            }
            mx = row_max<CG>(mx);
            const float m_new = fmaxf(m[i], mx);
            // A row that has seen no key yet keeps m = -inf; exponentiate against 0 instead so
            // that its P and alpha are 0, not exp2(-inf + inf) = NaN.
            const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
            const float alpha = exp2f(m[i] - m_ref);
            float rowsum = 0.0f;
#pragma unroll
            for (int j = 0; j < TN; j++) {
                const float pij = exp2f(s[i][j] - m_ref);
                s[i][j] = pij;
                rowsum += pij;
            }
            l[i] = l[i] * alpha + rowsum;
            m[i] = m_new;
#pragma unroll
            for (int qq = 0; qq < OQ; qq++)
                o[i][qq] = make_float4(o[i][qq].x * alpha, o[i][qq].y * alpha, o[i][qq].z * alpha,
                                       o[i][qq].w * alpha);
#pragma unroll
            for (int j = 0; j < TN; j++)
                Ps[(rg + RG * i) * T::PS + cg + CG * j] = s[i][j];
        }
        cp_async_wait<0>(); // V_j has landed
        __syncthreads();    // P_ij visible to the row's threads; Ks free

        if (kv_next < kv_end)
            load_tile<BC, D, T::KS, NT>(Ks, k + (size_t)kv_next * a.d, min(BC, a.Tk - kv_next),
                                        a.d, a.vec_qk, tid);
        cp_async_commit();

        // Õ += P_ij V_j   (Br, D)
        if (has_rows)
            mma_ab<TM, OQ, RG, CG, BC, T::PS, T::VS>(o, Ps, Vs, rg, cg);
        __syncthreads(); // Vs and Ps free

        if (kv_next < kv_end)
            load_tile<BC, D, T::VS, NT>(Vs, v + (size_t)kv_next * a.dv, min(BC, a.Tk - kv_next),
                                        a.dv, a.vec_v, tid);
        cp_async_commit();
    }
    cp_async_wait<0>(); // nothing left in flight (an empty walk never waited for Q_i)

    // One rescale: O = Õ / l, lse = (m + log2 l) ln 2, written once. A row that saw no key gets
    // O = 0 and lse = -inf (l = 0), or lse = its sink logit (l = 1, m = s_h).
#pragma unroll
    for (int i = 0; i < TM; i++) {
        l[i] = row_sum<CG>(l[i]);
        const int row = rg + RG * i;
        if (row >= rows_q)
            continue;
        const bool empty = l[i] == 0.0f;
        store_row<OQ, CG>(a.o + ((size_t)g * a.R + q0 + row) * a.dv, o[i],
                          empty ? 0.0f : 1.0f / l[i], a.dv, a.vec_o, cg);
        if (cg == 0)
            a.lse[(size_t)g * a.R + q0 + row] = empty ? -INFINITY : (m[i] + log2f(l[i])) * kLn2;
    }
    if (tid == 0)
        hbm_dev_add(a.hbm, HBM_WRITTEN, (unsigned long long)rows_q * (a.dv + 1) * sizeof(float));
}

// Launches one configuration; raises the dynamic shared-memory limit once per instantiation.
template <int D, int BR, int BC, int TM, int TN, int MINB>
int fa2_launch(const Fa2Args &a, int heads, cudaStream_t stream, FlError *err)
{
    using T = Fa2Tile<D, BR, BC, TM, TN>;
    auto kernel = fa2_forward_kernel<D, BR, BC, TM, TN, MINB>;
    static bool smem_raised = false;
    if (!smem_raised) {
        int rc = fl_cuda_status(cudaFuncSetAttribute(kernel,
                                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     (int)T::SMEM_BYTES),
                                "fa2: raising the shared-memory limit", err);
        if (rc != FL_OK)
            return rc;
        smem_raised = true;
    }
    dim3 grid((unsigned)heads, (unsigned)ceil_div(a.R, BR));
    kernel<<<grid, T::NT, T::SMEM_BYTES, stream>>>(a);
    return fl_cuda_launch_status("fa2_forward_kernel", err);
}

// ==== the backward pass ==========================================================================
//
// Per kv head, over its R packed query rows (Tq below), with P = exp(S - lse) recomputed from the
// saved lse (no T x T tensor anywhere):
//   D   = rowsum(dO ∘ O)                    (Tq)       one small kernel, into the workspace
//   dV  = P^T dO                            (Tk, dv)
//   dP  = dO V^T                            (Tq, Tk)   never stored: one tile at a time
//   dS  = P ∘ (dP - D)                      (Tq, Tk)   D replaces rowsum(P ∘ dP) (README: why)
//   dK  = scale dS^T Q                      (Tk, d)
//   dQ  = scale dS K                        (Tq, d)
// The main kernel gives one thread block to each K/V tile K_j, V_j (Bc rows) and walks over every
// query tile Q_i, dO_i (Br rows): dK_j and dV_j stay in registers for the whole walk and are
// written once. dQ_i gets a contribution from every K/V tile, so it is summed in HBM:
//   default variant:        float32 atomics add scale dS_ij K_j into dQ_i (order varies per run)
//   variant deterministic:  a second kernel owns each Q tile, walks the K/V tiles in order and
//                           recomputes S, P, dP, dS to form dQ_i in registers (bitwise repeatable)

struct BwdArgs {
    const float *q, *k, *v, *o, *lse, *dO;
    float *dQ, *dK, *dV;          // gradients, same shapes as q, k, v
    float *D;                     // D = rowsum(dO ∘ O)  (B, Hq, Tq), in the workspace
    int R, Tk, d, dv;             // R = group * Tq packed query rows per kv head
    Causal causal;
    float scale, scale_log2;
    bool vec_qk, vec_v, vec_dq, vec_dk, vec_dv;
    unsigned long long *hbm;
};

// D = rowsum(dO ∘ O), one warp per query row (all B Hq Tq rows).
__global__ void bwd_d_kernel(const float *dout, const float *o, float *D, long long rows, int dv,
                             unsigned long long *hbm)
{
    const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    float acc = 0.0f;
    for (int c = lane; c < dv; c += 32)
        acc = fmaf(dout[row * dv + c], o[row * dv + c], acc);
    acc = row_sum<32>(acc);
    if (lane == 0) {
        D[row] = acc;
        hbm_dev_add(hbm, HBM_READ, 2ull * dv * sizeof(float));
        hbm_dev_add(hbm, HBM_WRITTEN, sizeof(float));
    }
}

// dsinks[h] = -sum over (b, i) of exp(s_h - lse) D, one block per query head h. Each thread sums
// a fixed strided share of the B Tq rows and block_sum adds the shares in a fixed tree: the same
// result every run (no atomics). lse >= s_h is finite for every row when sinks are given.
__global__ void sink_gradient_kernel(const float *sinks, const float *lse, const float *D,
                                     float *dsinks, int B, int Hq, int Tq, unsigned long long *hbm)
{
    __shared__ float scratch[32];
    const int h = blockIdx.x;
    const float s = sinks[h];
    float acc = 0.0f;
    for (long long k = threadIdx.x; k < (long long)B * Tq; k += blockDim.x) {
        const size_t row = ((size_t)(k / Tq) * Hq + h) * Tq + (size_t)(k % Tq); // (b, h, i)
        /* exercise: begin — sink_gradient_kernel: add row (b, h, i)'s P_sink D to this thread's acc, P_sink = exp(s_h - lse); block_sum then adds the threads' shares in a fixed order (check 10 --device cuda: dsinks.npy of the fwd+bwd *sinks* cases) | stub: acc += 0.0f * D[row] * s; */
        acc = fmaf(expf(s - lse[row]), D[row], acc);                         // P_sink D
        /* exercise: end */
    }
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) {
        dsinks[h] = -acc;
        hbm_dev_add(hbm, HBM_READ, (2ull * B * Tq + 1) * sizeof(float)); // lse, D, s_h
        hbm_dev_add(hbm, HBM_WRITTEN, sizeof(float));
    }
}

// Launches sink_gradient_kernel when the problem has learned sinks; D is (B, Hq, Tq).
static int sink_gradient(const AttnProblem *p, const AttnTensors *t, const float *D,
                         unsigned long long *hbm, FlError *err)
{
    if (!p->sinks)
        return FL_OK;
    sink_gradient_kernel<<<(unsigned)p->Hq, 256>>>(p->sinks, t->lse, D, t->dsinks, p->B, p->Hq,
                                                   p->Tq, hbm);
    return fl_cuda_launch_status("sink_gradient_kernel", err);
}

// Q_i, dO_i, lse_i and D_i of one query tile (rows_q rows from row0) into shared memory.
template <class T>
__device__ __forceinline__ void load_query_tile(const BwdSmem<T> &sm, const BwdArgs &a,
                                                size_t row0, int rows_q, int tid)
{
    load_tile<T::BR, T::D, T::QS, T::NT>(sm.Qs, a.q + row0 * a.d, rows_q, a.d, a.vec_qk, tid);
    load_tile<T::BR, T::D, T::QS, T::NT>(sm.dOs, a.dO + row0 * a.dv, rows_q, a.dv, a.vec_v, tid);
    load_vector<T::BR, T::NT>(sm.Ls, a.lse + row0, rows_q, tid);
    load_vector<T::BR, T::NT>(sm.Ds, a.D + row0, rows_q, tid);
    cp_async_commit();
    if (tid == 0)
        hbm_dev_add(a.hbm, HBM_READ, (unsigned long long)rows_q * (a.d + a.dv + 2) * sizeof(float));
}

// K_j, V_j of one key tile (rows_kv rows from row0) into shared memory.
template <class T>
__device__ __forceinline__ void load_key_tile(const BwdSmem<T> &sm, const BwdArgs &a,
                                              size_t row0, int rows_kv, int tid)
{
    load_tile<T::BC, T::D, T::QS, T::NT>(sm.Ks, a.k + row0 * a.d, rows_kv, a.d, a.vec_qk, tid);
    load_tile<T::BC, T::D, T::QS, T::NT>(sm.Vs, a.v + row0 * a.dv, rows_kv, a.dv, a.vec_v, tid);
    cp_async_commit();
    if (tid == 0)
        hbm_dev_add(a.hbm, HBM_READ, (unsigned long long)rows_kv * (a.d + a.dv) * sizeof(float));
}

// Step 1 of a (Q_i, K_j) tile pair, thread micro-tile rows r = srg + SRG i, keys c = scg + SCG j.
//   half 0: S = Q_i K_j^T,  P = exp(scale S - lse) = exp2(scale log2(e) S - log2(e) lse) -> P^T
//   half 1: dP = dO_i V_j^T, returned in dp
// Rows past R, keys past Tk (the zero-filled part of a short tile) and, in a tile that crosses
// an edge of the mask, the keys the row does not see get P = 0.
template <class T>
__device__ __forceinline__ void p_and_dp(const BwdSmem<T> &sm, const BwdArgs &a, int half, int q0,
                                         int rows_q, const TileRuns &tile, int kv0, int rows_kv,
                                         int srg, int scg, float (&dp)[T::STM][T::STN])
{
    zero(dp);
    if (half == 1) {
        mma_abt<T::STM, T::STN, T::SRG, T::SCG, T::D, T::QS, T::QS>(dp, sm.dOs, sm.Vs, srg, scg);
        return;
    }
    float s[T::STM][T::STN];
    zero(s);
    mma_abt<T::STM, T::STN, T::SRG, T::SCG, T::D, T::QS, T::QS>(s, sm.Qs, sm.Ks, srg, scg);
    const bool cross = crosses(a.causal, tile, kv0, rows_kv);
#pragma unroll
    for (int i = 0; i < T::STM; i++) {
        const int r = srg + T::SRG * i;
        const float lse2 = sm.Ls[r] * kLog2e; // -inf for a row that sees no key: masked below
        const KeyRuns runs = row_runs(a.causal, cross ? q0 + r : 0); // used if cross
#pragma unroll
        for (int j = 0; j < T::STN; j++) {
            const int c = scg + T::SCG * j; // rows past R and keys past Tk are not real
            const bool real = r < rows_q && c < rows_kv && (!cross || sees(runs, kv0 + c));
            sm.PTs[c * T::PTS + r] = real ? exp2f(s[i][j] * a.scale_log2 - lse2) : 0.0f;
        }
    }
}

// Step 2, half 1 only, once P^T is visible: dS = P ∘ (dP - D) into dS^T and/or dS.
template <class T, bool STORE_T, bool STORE_N>
__device__ __forceinline__ void ds_from_p(const BwdSmem<T> &sm, int srg, int scg,
                                          const float (&dp)[T::STM][T::STN])
{
#pragma unroll
    for (int i = 0; i < T::STM; i++) {
        const int r = srg + T::SRG * i;
        const float Dr = sm.Ds[r];
#pragma unroll
        for (int j = 0; j < T::STN; j++) {
            const int c = scg + T::SCG * j;
            const float ds = sm.PTs[c * T::PTS + r] * (dp[i][j] - Dr); // dS = P ∘ (dP - D)
            if (STORE_T)
                sm.dSTs[c * T::PTS + r] = ds;
            if (STORE_N)
                sm.dSs[r * T::DSS + c] = ds;
        }
    }
}

// One block per K/V tile j of one kv head: dV_j (half 0) and dK_j (half 1) in registers over all
// query tiles i of the group's R packed rows, so the group's sum needs no atomics. DQ_ATOMIC: also
// add dQ_i += scale dS_ij K_j into HBM with atomics (default variant).
template <class T, bool DQ_ATOMIC>
__global__ void __launch_bounds__(T::NT, T::MINB) bwd_dkdv_kernel(BwdArgs a)
{
    extern __shared__ float4 smem4[];
    const BwdSmem<T> sm(reinterpret_cast<float *>(smem4));
    const int tid = threadIdx.x, half = tid / T::HALF, ht = tid % T::HALF;
    const int srg = ht / T::SCG, scg = ht % T::SCG; // scores, within a half
    const int org = ht / T::OCG, ocg = ht % T::OCG; // dV_j / dK_j, within a half
    const int qrg = tid / T::QCG, qcg = tid % T::QCG; // dQ_i, whole block
    // Grid (kv heads, K/V tiles): with the mask on, K/V tile 0 is seen by every query tile and
    // the last one by the fewest, so the natural order already starts the longest walks first.
    const int g = blockIdx.x;
    const int kv0 = blockIdx.y * T::BC, rows_kv = min(T::BC, a.Tk - kv0);
    const size_t q_row0 = (size_t)g * a.R, kv_row0 = (size_t)g * a.Tk + kv0;
    // The query tiles of the group that see K_j, in order; the ones above the diagonal (in every
    // query head of the group) are skipped.
    /* exercise: begin — dK/dV kernel: first, the first query tile of the group with a row that sees a key of this K/V tile [kv0, kv0 + rows_kv) (next_tile_seeing from row 0), a.R when none does; the walk goes on from there (check 10 --device cuda: dk and dv of every fwd+bwd case, and the hbm read of window_sinks_t512 equals the reference's) | stub: const int first = a.R; */
    const int first = next_tile_seeing(a.causal, 0, T::BR, a.R, kv0, rows_kv);
    /* exercise: end */

    load_key_tile(sm, a, kv_row0, rows_kv, tid); // K_j, V_j: read once
    if (first < a.R)                             // Q_i, dO_i, lse_i, D_i of the first tile
        load_query_tile(sm, a, q_row0 + first, min(T::BR, a.R - first), tid);

    float4 acc[T::KTM][T::OQ]; // half 0: dV_j;  half 1: dK_j   (Bc, D)
    zero(acc);

    for (int q0 = first, q_next; q0 < a.R; q0 = q_next) {
        const int rows_q = min(T::BR, a.R - q0);
        q_next = next_tile_seeing(a.causal, q0 + T::BR, T::BR, a.R, kv0, rows_kv);
        cp_async_wait<0>();
        __syncthreads(); // Q_i, dO_i (and K_j, V_j) have landed

        float dp[T::STM][T::STN];
        p_and_dp(sm, a, half, q0, rows_q, tile_runs(a.causal, q0, rows_q), kv0, rows_kv, srg, scg,
                 dp);
        __syncthreads(); // P^T visible
        if (half == 1)
            ds_from_p<T, true, DQ_ATOMIC>(sm, srg, scg, dp);
        __syncthreads(); // dS^T (and dS) visible

        if (half == 0) // dV_j += P_ij^T dO_i   (Bc, dv)
            mma_ab<T::KTM, T::OQ, T::ORG, T::OCG, T::BR, T::PTS, T::QS>(acc, sm.PTs, sm.dOs, org,
                                                                        ocg);
        else // dK_j += dS_ij^T Q_i   (Bc, d), scaled at the end
            mma_ab<T::KTM, T::OQ, T::ORG, T::OCG, T::BR, T::PTS, T::QS>(acc, sm.dSTs, sm.Qs, org,
                                                                        ocg);
        __syncthreads(); // Q_i, dO_i free: the next query tile streams in during dQ

        if (q_next < a.R)
            load_query_tile(sm, a, q_row0 + q_next, min(T::BR, a.R - q_next), tid);

        if (DQ_ATOMIC) {
            // dQ_i += scale dS_ij K_j   (Br, d): added into HBM, one atomic read-modify-write each
            float4 dq[T::QTM][T::QQ];
            zero(dq);
            mma_ab<T::QTM, T::QQ, T::QRG, T::QCG, T::BC, T::DSS, T::QS>(dq, sm.dSs, sm.Ks, qrg,
                                                                        qcg);
#pragma unroll
            for (int i = 0; i < T::QTM; i++) {
                const int r = qrg + T::QRG * i;
                if (r < rows_q)
                    atomic_add_row<T::QQ, T::QCG>(a.dQ + (q_row0 + q0 + r) * a.d, dq[i], a.scale,
                                                  a.d, a.vec_dq, qcg);
            }
            if (tid == 0) {
                const unsigned long long bytes = (unsigned long long)rows_q * a.d * sizeof(float);
                hbm_dev_add(a.hbm, HBM_READ, bytes);
                hbm_dev_add(a.hbm, HBM_WRITTEN, bytes);
            }
        }
    }

    // dV_j, and dK_j = scale dS^T Q: written once
#pragma unroll
    for (int i = 0; i < T::KTM; i++) {
        const int r = org + T::ORG * i;
        if (r >= rows_kv)
            continue;
        if (half == 0)
            store_row<T::OQ, T::OCG>(a.dV + (kv_row0 + r) * a.dv, acc[i], 1.0f, a.dv, a.vec_dv,
                                     ocg);
        else
            store_row<T::OQ, T::OCG>(a.dK + (kv_row0 + r) * a.d, acc[i], a.scale, a.d, a.vec_dk,
                                     ocg);
    }
    if (tid == 0)
        hbm_dev_add(a.hbm, HBM_WRITTEN, (unsigned long long)rows_kv * (a.d + a.dv) * sizeof(float));
}

// Variant deterministic: one block per query tile i of one kv head's packed rows walks the K/V tiles j in order,
// recomputes P_ij and dS_ij, and sums dQ_i = scale sum_j dS_ij K_j in registers; written once.
template <class T>
__global__ void __launch_bounds__(T::NT, T::MINB) bwd_dq_kernel(BwdArgs a)
{
    extern __shared__ float4 smem4[];
    const BwdSmem<T> sm(reinterpret_cast<float *>(smem4));
    const int tid = threadIdx.x, half = tid / T::HALF, ht = tid % T::HALF;
    const int srg = ht / T::SCG, scg = ht % T::SCG;
    const int qrg = tid / T::QCG, qcg = tid % T::QCG;
    // Grid (kv heads, query tiles), tiles in reverse as in the forward: longest rows first.
    const int g = blockIdx.x;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * T::BR, rows_q = min(T::BR, a.R - q0);
    const size_t q_row0 = (size_t)g * a.R + q0, kv_row0 = (size_t)g * a.Tk;
    // The K/V tiles the rows see, as in the forward: the sink tiles, then the band to kv_end.
    const TileRuns tile = tile_runs(a.causal, q0, rows_q);
    const int kv_end = tile.far.hi, kv_first = next_key_tile(tile, 0, T::BC);

    load_query_tile(sm, a, q_row0, rows_q, tid); // Q_i, dO_i, lse_i, D_i: read once
    if (kv_first < kv_end)
        load_key_tile(sm, a, kv_row0 + kv_first, min(T::BC, a.Tk - kv_first), tid);

    float4 dq[T::QTM][T::QQ]; // dQ_i   (Br, d)
    zero(dq);
    for (int kv0 = kv_first, kv_next; kv0 < kv_end; kv0 = kv_next) {
        const int rows_kv = min(T::BC, a.Tk - kv0);
        kv_next = next_key_tile(tile, kv0 + T::BC, T::BC);
        cp_async_wait<0>();
        __syncthreads(); // K_j, V_j have landed

        float dp[T::STM][T::STN];
        p_and_dp(sm, a, half, q0, rows_q, tile, kv0, rows_kv, srg, scg, dp);
        __syncthreads(); // P^T visible
        if (half == 1)
            ds_from_p<T, false, true>(sm, srg, scg, dp);
        __syncthreads(); // dS visible; Vs free

        // dQ_i += dS_ij K_j   (Br, d), in a fixed order of j: the same sum every run
        mma_ab<T::QTM, T::QQ, T::QRG, T::QCG, T::BC, T::DSS, T::QS>(dq, sm.dSs, sm.Ks, qrg, qcg);
        __syncthreads(); // Ks, dSs free

        if (kv_next < kv_end)
            load_key_tile(sm, a, kv_row0 + kv_next, min(T::BC, a.Tk - kv_next), tid);
    }
    cp_async_wait<0>(); // an empty walk (rows that see no key) never waited for Q_i

#pragma unroll
    for (int i = 0; i < T::QTM; i++) {
        const int r = qrg + T::QRG * i;
        if (r < rows_q)
            store_row<T::QQ, T::QCG>(a.dQ + (q_row0 + r) * a.d, dq[i], a.scale, a.d, a.vec_dq, qcg);
    }
    if (tid == 0)
        hbm_dev_add(a.hbm, HBM_WRITTEN, (unsigned long long)rows_q * a.d * sizeof(float));
}

// Launches a kernel with `smem` bytes of dynamic shared memory (raising the per-kernel limit).
template <typename Kernel>
int launch_with_smem(Kernel kernel, dim3 grid, int threads, size_t smem, const BwdArgs &a,
                     const char *name, FlError *err)
{
    int rc = fl_cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 (int)smem),
                            name, err);
    if (rc != FL_OK)
        return rc;
    kernel<<<grid, threads, smem>>>(a);
    return fl_cuda_launch_status(name, err);
}

// dK, dV (and with atomics dQ) from the K/V-tile kernel; the deterministic variant adds the
// dQ kernel. T: the tile configuration (README: the shared-memory budget).
template <class T> int bwd_launch(const BwdArgs &a, int heads, bool deterministic, FlError *err)
{
    const dim3 kv_grid((unsigned)heads, (unsigned)ceil_div(a.Tk, T::BC));
    if (!deterministic)
        return launch_with_smem(bwd_dkdv_kernel<T, true>, kv_grid, T::NT, T::SMEM_BYTES, a,
                                "bwd_dkdv_kernel (dQ by atomics)", err);
    int rc = launch_with_smem(bwd_dkdv_kernel<T, false>, kv_grid, T::NT, T::SMEM_BYTES, a,
                              "bwd_dkdv_kernel", err);
    if (rc != FL_OK)
        return rc;
    const dim3 q_grid((unsigned)heads, (unsigned)ceil_div(a.R, T::BR));
    return launch_with_smem(bwd_dq_kernel<T>, q_grid, T::NT, T::SMEM_BYTES, a, "bwd_dq_kernel",
                            err);
}

} // namespace

static Fa2Args fa2_args(const AttnProblem *p, AttnTensors *t, const RunCtx *ctx)
{
    Fa2Args a;
    a.q = p->q, a.k = p->k, a.v = p->v, a.o = t->o, a.lse = t->lse;
    a.R = p->Hq / p->Hkv * p->Tq, a.Tk = p->Tk, a.d = p->d, a.dv = p->dv;
    a.causal = causal_make(p->causal, p->Tq, p->Tk, p->window, p->sink_tokens);
    a.sinks = p->sinks, a.Hq = p->Hq;
    a.scale_log2 = p->scale * kLog2e;
    const auto aligned = [](const void *x) { return ((uintptr_t)x & 15u) == 0; };
    a.vec_qk = p->d % 4 == 0 && aligned(p->q) && aligned(p->k);
    a.vec_v = p->dv % 4 == 0 && aligned(p->v);
    a.vec_o = p->dv % 4 == 0 && aligned(t->o);
    a.hbm = ctx->hbm_dev;
    return a;
}

static int fa2_forward_cuda(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    if (p->d <= 0 || p->dv <= 0 || p->d > 128 || p->dv > 128)
        return fl_fail(err, FL_BAD_INPUT,
                       "FA2 kernel: head dims d = %d, dv = %d; this kernel supports 1..128",
                       p->d, p->dv);
    if (p->Hkv <= 0 || p->Hq % p->Hkv != 0)
        return fl_fail(err, FL_BAD_INPUT, "FA2 kernel: Hq = %d is not a multiple of Hkv = %d",
                       p->Hq, p->Hkv);
    if (p->Tq <= 0 || p->Tk <= 0 || p->B <= 0 || p->Hq <= 0)
        return FL_OK; // nothing to compute
    const Fa2Args a = fa2_args(p, t, ctx);
    const int heads = p->B * p->Hkv;
    switch (fa2_padded_dim(p->d, p->dv)) {
    case 32: return fa2_launch<FA2_CONFIG_D32>(a, heads, 0, err);
    case 64: return fa2_launch<FA2_CONFIG_D64>(a, heads, 0, err);
    case 96: return fa2_launch<FA2_CONFIG_D96>(a, heads, 0, err);
    default: return fa2_launch<FA2_CONFIG_D128>(a, heads, 0, err);
    }
}

// ---- the backward pass, host side ---------------------------------------------------------------

// D = rowsum(dO ∘ O) (B, Hq, Tq) lives in the workspace: the backward's only extra memory.
static size_t bwd_workspace_bytes(const AttnProblem *p, const RunCtx *ctx, Direction dir)
{
    (void)ctx;
    return dir == DIR_BWD ? (size_t)p->B * p->Hq * p->Tq * sizeof(float) : 0;
}

static BwdArgs bwd_args(const AttnProblem *p, AttnTensors *t, const RunCtx *ctx)
{
    BwdArgs a;
    a.q = p->q, a.k = p->k, a.v = p->v, a.o = t->o, a.lse = t->lse, a.dO = p->dout;
    a.dQ = t->dq, a.dK = t->dk, a.dV = t->dv, a.D = (float *)ctx->workspace;
    a.R = p->Hq / p->Hkv * p->Tq, a.Tk = p->Tk, a.d = p->d, a.dv = p->dv;
    a.causal = causal_make(p->causal, p->Tq, p->Tk, p->window, p->sink_tokens);
    a.scale = p->scale, a.scale_log2 = p->scale * kLog2e;
    const auto aligned = [](const void *x) { return ((uintptr_t)x & 15u) == 0; };
    a.vec_qk = p->d % 4 == 0 && aligned(p->q) && aligned(p->k);
    a.vec_v = p->dv % 4 == 0 && aligned(p->v) && aligned(p->dout);
    a.vec_dq = p->d % 4 == 0 && aligned(t->dq);
    a.vec_dk = p->d % 4 == 0 && aligned(t->dk);
    a.vec_dv = p->dv % 4 == 0 && aligned(t->dv);
    a.hbm = ctx->hbm_dev;
    return a;
}

static int bwd_cuda(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, bool deterministic,
                    FlError *err)
{
    if (p->d <= 0 || p->dv <= 0 || p->d > 128 || p->dv > 128)
        return fl_fail(err, FL_BAD_INPUT,
                       "FA2 backward kernel: head dims d = %d, dv = %d; this kernel supports 1..128",
                       p->d, p->dv);
    if (p->Tq <= 0 || p->Tk <= 0 || p->B <= 0 || p->Hq <= 0)
        return FL_OK; // nothing to compute
    const BwdArgs a = bwd_args(p, t, ctx);
    const int heads = p->B * p->Hkv;
    const long long rows = (long long)heads * a.R; // every query row, B Hq Tq

    // D = rowsum(dO ∘ O): 8 rows (warps) per block
    bwd_d_kernel<<<(unsigned)((rows + 7) / 8), 256>>>(a.dO, a.o, a.D, rows, a.dv, a.hbm);
    int rc = fl_cuda_launch_status("bwd_d_kernel", err);
    if (rc == FL_OK && !deterministic) { // the atomics add into dQ = 0
        const size_t bytes = (size_t)rows * p->d * sizeof(float);
        rc = fl_cuda_status(cudaMemsetAsync(t->dq, 0, bytes), "zeroing dq", err);
        if (rc == FL_OK)
            rc = hbm_dev_add_from_host(a.hbm, 0, bytes, err);
    }
    if (rc != FL_OK)
        return rc;
    switch (fa2_padded_dim(p->d, p->dv)) {
    case 32: rc = bwd_launch<BwdConfig<32>>(a, heads, deterministic, err); break;
    case 64: rc = bwd_launch<BwdConfig<64>>(a, heads, deterministic, err); break;
    case 96: rc = bwd_launch<BwdConfig<96>>(a, heads, deterministic, err); break;
    default: rc = bwd_launch<BwdConfig<128>>(a, heads, deterministic, err); break;
    }
    return rc == FL_OK ? sink_gradient(p, t, a.D, a.hbm, err) : rc;
}

static int bwd_cuda_atomic(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    return bwd_cuda(p, t, ctx, false, err);
}

static int bwd_cuda_deterministic(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    return bwd_cuda(p, t, ctx, true, err);
}

static const StageImpl bwd_cuda_flash = {
    "10",
    "swa_sinks",
    "",
    DEVICE_CUDA,
    "window + sink tokens + learned sinks: only band and sink tiles loaded, dsinks = -sum P_sink D",
    FEAT_BACKWARD | FEAT_CAUSAL | FEAT_GQA | FEAT_WINDOW | FEAT_SINK_TOKENS | FEAT_SINKS,
    fa2_forward_cuda,
    bwd_cuda_atomic,
    bwd_workspace_bytes,
};

static const StageImpl bwd_cuda_det = {
    "10",
    "swa_sinks",
    "deterministic",
    DEVICE_CUDA,
    "window/sinks backward without atomics: a second kernel per packed Q tile sums dQ in a fixed order",
    FEAT_BACKWARD | FEAT_CAUSAL | FEAT_GQA | FEAT_WINDOW | FEAT_SINK_TOKENS | FEAT_SINKS,
    fa2_forward_cuda,
    bwd_cuda_deterministic,
    bwd_workspace_bytes,
};

static const StageImpl bwd_cuda_naive = {
    "10",
    "swa_sinks",
    "naive",
    DEVICE_CUDA,
    "textbook attention with cuBLAS, window/sink mask and sink logit on the materialised P",
    FEAT_BACKWARD | FEAT_CAUSAL | FEAT_GQA | FEAT_WINDOW | FEAT_SINK_TOKENS | FEAT_SINKS,
    cuda_naive_forward,
    cuda_naive_backward,
    cuda_naive_workspace_bytes,
};

extern "C" const StageImpl *const stage10_swa_sinks_cuda[] = {&bwd_cuda_flash, &bwd_cuda_det,
                                                             &bwd_cuda_naive, NULL};
