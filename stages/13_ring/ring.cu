/* stages/13_ring/ring.cu — ring attention on GPUs, float32: one rank per GPU, the K/V shards passed
 * from GPU to GPU with NCCL while each GPU computes, forward and backward, with the causal mask (the
 * balanced split of ring.c) and GQA.
 *
 * The algorithm is ring.c's: rank r keeps its queries, and at step s = 0 .. P - 1 attends them to
 * the shard of rank (r - s) mod P, merging the partial results with their logsumexps. What the GPU
 * side adds is time: the next shard travels while the current one is computed, so that the link
 * costs nothing as long as a step's compute takes longer than a shard's transfer. That is the lesson
 * of this file, and it lives in ring_pass() below; the kernels are stage 08's, reshaped to work on
 * one step's chunk pairs.
 *
 * A rank on a GPU holds its share (split.h): its two query chunks (q, o, lse, dO, dq) and its own
 * shard (k, v; dk, dv where its keys' gradients end up), each chunk-major. Its GPU runs two streams:
 *   compute   the attention kernels: a rank's step kernels run one after the other here
 *   link      NCCL: ncclSend to rank r + 1 and ncclRecv from rank r - 1, in a group
 * Work on two streams may run at the same time; CUDA events put an order between them only where
 * one stream needs what the other wrote or must not overwrite what the other still reads.
 *
 * The K/V buffers. The rank's own shard is an input: step 0 reads it in place and it is never
 * written. The shards that arrive go into two ring buffers, kv[0] and kv[1] (the workspace), in
 * turn: the shard of step s (s >= 1) is in kv[s % 2], and while step s computes on it, the link
 * stream sends it on and receives the shard of step s + 1 into the other one, kv[(s + 1) % 2].
 * Two events per buffer keep that safe:
 *   full[b]    recorded on link after the receive into kv[b]; compute waits for it before the
 *              step that reads kv[b] (the shard has arrived);
 *   freed[b]   recorded on compute after the step that read kv[b]; link waits for it before it
 *              receives into kv[b] again (nobody still reads the old shard).
 * With one buffer the receive of step s + 1 would have to wait for step s to finish reading: no
 * overlap. With two, the receive lands in the buffer that step s - 1 read, which is free by then.
 *
 * Forward, step s: one kernel (step_forward_kernel) over every query tile of the rank's two query
 * chunks, the GQA group's query heads packed as in stage 08, against the keys of the held shard the
 * tile sees (both key chunks, one running softmax over them, positions from mask.h's causal_pair),
 * then one merge of the step's (O_s, lse_s) into the rank's o and lse:
 *   lse = log(exp(lse_acc) + exp(lse_s)),   o = exp(lse_acc - lse) o_acc + exp(lse_s - lse) O_s
 * (ring.c merges after each chunk pair; the kernel keeps the step's result in registers and merges
 * once per step.) Before step 0, o = 0 and lse = -inf, the empty merge.
 *
 * Backward: first D = rowsum(dO ∘ O) and dq = 0 for the rank's rows. At step s a kernel per key tile
 * of the held shard (step_backward_kernel, stage 08's K/V-tile kernel) walks the rank's query tiles
 * that see the tile, writes the rank's share of dK and dV for those keys into dkv_step and adds
 * scale dS K into dq with atomics: dq never leaves the rank. dK and dV travel around the ring like
 * K and V, but one hop behind them, because they are only final for step s once step s has run:
 *   acc_in    the dK, dV of the held shard summed over the ranks before this one: they arrive from
 *             rank r - 1 while step s computes (event acc_arrived);
 *   fold      once step s is done and acc_in has arrived: acc_out = acc_in + dkv_step (event folded);
 *   acc_out   leaves for rank r + 1 on the link stream while step s + 1 computes.
 * Adding acc_in inside the step kernel would make every step wait for the previous rank's gradients
 * before it could start, the transfer in full view. After its P-th fold, on rank r - 1 (mod P), a
 * shard's gradients are complete; the last send of the pass carries them to their owner, straight
 * into its dk, dv. So a rank sends P - 1 K/V shards and P dK/dV shards, as on the CPU.
 *
 * Before step 0, each rank's compute stream waits for the caller's work on the legacy default stream
 * (uploads, poisoning: the ring's streams are non-blocking, so nothing else orders them after it),
 * then records `ready`, which link waits for: its first send reads the rank's own K/V shard.
 * Per rank and step s, in the order the host enqueues it (P ranks; held = own shard at s = 0, else
 * kv[s % 2]):
 *   compute:  [s >= 1: wait full[s % 2]]   step kernel on held   record freed[s % 2]
 *             backward: [s >= 1: wait acc_arrived]   fold   record folded
 *   link:     s < P - 1: [s >= 2: wait freed[(s + 1) % 2]]   group{send held, recv kv[(s + 1) % 2]}
 *             record full[(s + 1) % 2]
 *             backward, P > 1: wait folded   group{send acc_out, recv acc_in (last step: dk, dv)}
 *             record acc_arrived
 * An event is waited on before it is recorded again, which is why the buffer events come in pairs:
 * one freed event would already stand for step s when link came to wait for step s - 1.
 *
 * Two ways to start the ranks (README.md, "Two launch modes"):
 *   mode A  one process drives every GPU (ncclCommInitAll; none with P = 1, which never sends).
 *           This is what `flashlab check 13 --device cuda --ranks P` runs through the normal
 *           runner, which puts the whole problem on the current GPU: the stage hands each rank its
 *           share (scatter), runs the ring over GPUs home, home + 1, ..., and gathers o, lse or the
 *           gradients back. One host thread enqueues the work of all ranks, so the NCCL calls of
 *           all ranks of a step share one group: NCCL asks that of a thread driving several
 *           ranks, since a call outside a group may wait for a peer whose call is not posted yet.
 *   mode B  one process per GPU (ncclCommInitRank), as across hosts: RunCtx.comm is that rank's
 *           communicator and every pointer is already its share (launch/ring_rank.cu).
 * Both run ring_pass(), with P local ranks or one.
 *
 * Counting (docs/hbm_model.md, "Stage 13 on GPUs"): the kernels count their own global loads and
 * stores into a counter of their rank; the link bytes are counted on the host as the sends and
 * receives are posted. Handing out and gathering (mode A) are not counted, as on the CPU. */
#include <cuda_runtime.h>
#include <math.h>
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "cuda_fa2_tiles.cuh"
#include "cuda_tiles.cuh"
#include "cuda_util.h"
#include "error.h"
#include "mask.h"
#include "split.h"

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kMaxRanks = 64; // flashlab's --ranks limit

int nccl_status(ncclResult_t status, const char *what, FlError *err)
{
    if (status == ncclSuccess)
        return FL_OK;
    return fl_fail(err, FL_BAD_INPUT, "NCCL error in %s: %s", what, ncclGetErrorString(status));
}

// ==== the forward step ===========================================================================
//
// One thread block owns one query tile (Br packed rows of one query chunk of one kv head's group)
// and walks the key tiles of the held shard that the tile sees: key chunk 0's, then key chunk 1's,
// one running (m, l, Õ) in registers over both (stage 05's online softmax does not care where the
// keys come from). Then it merges the step's O_s = Õ / l, lse_s = m + log l into o and lse.

struct FwdStep {
    // The rank's query chunks: chunk qw's packed rows of kv head g start at q[qw] + g R[qw] d.
    const float *q[2];
    float *o[2], *lse[2];
    int R[2];     // packed rows per kv head in chunk qw: group * rows of the chunk
    int tiles[2]; // query tiles of chunk qw
    // The held shard: key chunk kw of kv head g starts at k[kw] + g m[kw] d.
    const float *k[2], *v[2];
    int m[2];
    Causal causal[2][2]; // [query chunk][key chunk]: mask.h's chunk pair
    int d, dv;
    float scale_log2; // scale * log2(e): scores live in base 2
    bool vec_qk, vec_v, vec_o;
    unsigned long long *hbm; // [read, written] or NULL
};

// x[i] for i = 0 or 1, as a select: an index into a kernel argument's array would copy the array
// to local memory.
template <class X> __device__ __forceinline__ X pick(const X (&x)[2], int i) { return i ? x[1] : x[0]; }

template <int D, int BR, int BC, int TM, int TN, int MINB>
__global__ void __launch_bounds__(Fa2Tile<D, BR, BC, TM, TN>::NT, MINB) step_forward_kernel(FwdStep a)
{
    using T = Fa2Tile<D, BR, BC, TM, TN>;
    constexpr int RG = T::RG, CG = T::CG, NT = T::NT, OQ = T::OQ;
    extern __shared__ float4 smem4[];
    float *Qs = reinterpret_cast<float *>(smem4); // Q_i  (Br, D)
    float *Ks = Qs + BR * T::QS;                  // K_j  (Bc, D)
    float *Vs = Ks + BC * T::KS;                  // V_j  (Bc, D)
    float *Ps = Vs + BC * T::VS;                  // P_ij (Br, Bc)

    const int tid = threadIdx.x, rg = tid / CG, cg = tid % CG;
    // Grid (kv heads, query tiles): chunk 1's tiles, then chunk 0's, each in reverse, so that the
    // tiles of the latest rows (which see the most keys) start first.
    const int g = blockIdx.x, y = (int)blockIdx.y;
    const int qw = y < a.tiles[1] ? 1 : 0;
    const int tile = qw == 1 ? a.tiles[1] - 1 - y : a.tiles[1] + a.tiles[0] - 1 - y;
    const int R = pick(a.R, qw), q0 = tile * BR, rows_q = min(BR, R - q0);
    const size_t row0 = (size_t)g * R + q0; // first packed row of the tile in chunk qw
    const Causal c0 = qw == 1 ? a.causal[1][0] : a.causal[0][0]; // chunk qw against key chunk 0
    const Causal c1 = qw == 1 ? a.causal[1][1] : a.causal[0][1]; // and against key chunk 1

    // The keys of each key chunk that the tile's furthest row sees (a prefix of the chunk), walked
    // in tiles of Bc: chunk 0's tiles, then chunk 1's. Keys past them are never loaded.
    const int seen0 = a.m[0] > 0 ? tile_keys_seen(c0, q0, rows_q) : 0;
    const int seen1 = a.m[1] > 0 ? tile_keys_seen(c1, q0, rows_q) : 0;
    const int tiles0 = ceil_div(seen0, BC), n_tiles = tiles0 + ceil_div(seen1, BC);
    if (n_tiles == 0)
        return; // the tile sees no key of this shard: its rows keep what they have
    const bool has_rows = rg < rows_q;

    // Key tile t of the walk: its key chunk kw and keys [kv0, kv0 + rows) of that chunk.
    auto key_tile = [&](int t, int &kw, int &kv0, int &rows) {
        kw = t < tiles0 ? 0 : 1;
        kv0 = (kw == 1 ? t - tiles0 : t) * BC;
        rows = min(BC, (kw == 1 ? seen1 : seen0) - kv0);
    };
    auto load_k = [&](int t) {
        int kw, kv0, rows;
        key_tile(t, kw, kv0, rows);
        const float *k = pick(a.k, kw) + ((size_t)g * pick(a.m, kw) + kv0) * a.d;
        load_tile<BC, D, T::KS, NT>(Ks, k, rows, a.d, a.vec_qk, tid);
    };
    auto load_v = [&](int t) {
        int kw, kv0, rows;
        key_tile(t, kw, kv0, rows);
        const float *v = pick(a.v, kw) + ((size_t)g * pick(a.m, kw) + kv0) * a.dv;
        load_tile<BC, D, T::VS, NT>(Vs, v, rows, a.dv, a.vec_v, tid);
    };

    // Prologue: Q_i, K_0, V_0 in flight, three commit groups.
    load_tile<BR, D, T::QS, NT>(Qs, pick(a.q, qw) + row0 * a.d, rows_q, a.d, a.vec_qk, tid);
    cp_async_commit();
    load_k(0);
    cp_async_commit();
    load_v(0);
    cp_async_commit();
    if (tid == 0)
        hbm_dev_add(a.hbm, HBM_READ, (unsigned long long)rows_q * a.d * sizeof(float));

    float m[TM], l[TM]; // running max (base 2) and this thread's partial row sums
    float4 o[TM][OQ];   // Õ: unnormalised output rows
    zero(o);
#pragma unroll
    for (int i = 0; i < TM; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }

    for (int t = 0; t < n_tiles; t++) {
        int kw, kv0, rows_kv;
        key_tile(t, kw, kv0, rows_kv);
        const Causal c = kw == 1 ? c1 : c0;
        cp_async_wait<1>(); // Q_i and K_j have landed (V_j may still be in flight)
        __syncthreads();
        if (tid == 0)
            hbm_dev_add(a.hbm, HBM_READ, (unsigned long long)rows_kv * (a.d + a.dv) * sizeof(float));

        // S = Q_i K_j^T   (Br, Bc)
        float s[TM][TN];
        zero(s);
        if (has_rows)
            mma_abt<TM, TN, RG, CG, D, T::QS, T::KS>(s, Qs, Ks, rg, cg);

        // Online softmax in registers (base 2). Keys past the tile's rows_kv, and keys past a row's
        // position in a tile that crosses the chunk pair's diagonal, get -inf.
        const bool cross = crosses(c, q0, rows_q, kv0, rows_kv);
#pragma unroll
        for (int i = 0; i < TM; i++) {
            const int row = q0 + rg + RG * i;
            const int row_seen = cross ? seen_in_tile(c, row, kv0, rows_kv) : rows_kv;
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < TN; j++) {
                const float x = (cg + CG * j < row_seen) ? s[i][j] * a.scale_log2 : -INFINITY;
                s[i][j] = x;
                mx = fmaxf(mx, x);
            }
            mx = row_max<CG>(mx);
            const float m_new = fmaxf(m[i], mx);
            const float m_ref = m_new == -INFINITY ? 0.0f : m_new; // no key seen yet: stay finite
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

        if (t + 1 < n_tiles)
            load_k(t + 1);
        cp_async_commit();

        // Õ += P_ij V_j   (Br, D)
        if (has_rows)
            mma_ab<TM, OQ, RG, CG, BC, T::PS, T::VS>(o, Ps, Vs, rg, cg);
        __syncthreads(); // Vs and Ps free

        if (t + 1 < n_tiles)
            load_v(t + 1);
        cp_async_commit();
    }
    cp_async_wait<0>();

    // The merge, once per step. Every thread reads the rows' lse so far before any thread of the
    // row writes the new one.
    float lse_acc[TM];
#pragma unroll
    for (int i = 0; i < TM; i++) {
        l[i] = row_sum<CG>(l[i]);
        const int row = rg + RG * i;
        lse_acc[i] = row < rows_q ? pick(a.lse, qw)[row0 + row] : -INFINITY;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < TM; i++) {
        const int row = rg + RG * i;
        if (row < rows_q) {
            // This step's part: lse_s over the shard's keys (-inf when the row saw none of them).
            const float lse_s = l[i] == 0.0f ? -INFINITY : (m[i] + log2f(l[i])) * kLn2;
            /* exercise: begin — merge the step into the row: total = log(exp(lse_acc) + exp(lse_s)), and the weights w_acc of the row so far and w_s of O_s (check 13 --device cuda: o and lse) | stub: const float total = lse_s, w_acc = 0.0f, w_s = 0.0f; */
            const float hi = fmaxf(lse_acc[i], lse_s), shift = hi == -INFINITY ? 0.0f : hi;
            const float sum = expf(lse_acc[i] - shift) + expf(lse_s - shift); // NaN if either is NaN
            const float total = sum != 0.0f ? shift + logf(sum) : -INFINITY;
            const float w_acc = total == -INFINITY ? 0.0f : expf(lse_acc[i] - total);
            const float w_s = total == -INFINITY ? 0.0f : expf(lse_s - total);
            /* exercise: end */
            // o = w_acc o + w_s O_s, with O_s = Õ / l
            blend_row<OQ, CG>(pick(a.o, qw) + (row0 + row) * a.dv, o[i], l[i] == 0.0f ? 0.0f : w_s / l[i],
                              w_acc, a.dv, a.vec_o, cg);
            if (cg == 0)
                pick(a.lse, qw)[row0 + row] = total;
        }
    }
    if (tid == 0) { // o, lse read for the merge and written back
        const unsigned long long bytes = (unsigned long long)rows_q * (a.dv + 1) * sizeof(float);
        hbm_dev_add(a.hbm, HBM_READ, bytes);
        hbm_dev_add(a.hbm, HBM_WRITTEN, bytes);
    }
}

// The configurations are stage 08's, one per padded head dim (FA2_CONFIG_D*, common/cuda_fa2_tiles.cuh).
// The HBM model (tests/test_hbm_model_13.c) assumes Br = FA2_BLOCK_R.

// Kernel attributes belong to a device: the shared-memory limit is raised before every launch
// (cheap), not once per process, since the ranks of mode A run on several GPUs.
template <typename Kernel, typename Args>
int launch_with_smem(Kernel kernel, dim3 grid, int threads, size_t smem, cudaStream_t stream, const Args &a,
                     const char *name, FlError *err)
{
    int rc = fl_cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                            name, err);
    if (rc != FL_OK)
        return rc;
    kernel<<<grid, threads, smem, stream>>>(a);
    return fl_cuda_launch_status(name, err);
}

template <int D, int BR, int BC, int TM, int TN, int MINB>
int step_forward_launch(const FwdStep &a, int heads, cudaStream_t stream, FlError *err)
{
    using T = Fa2Tile<D, BR, BC, TM, TN>;
    static_assert(BR == FA2_BLOCK_R, "the host sizes the grid with FA2_BLOCK_R");
    const dim3 grid((unsigned)heads, (unsigned)(a.tiles[0] + a.tiles[1]));
    return launch_with_smem(step_forward_kernel<D, BR, BC, TM, TN, MINB>, grid, T::NT, T::SMEM_BYTES, stream, a,
                            "step_forward_kernel", err);
}

// Before the forward's steps: o = 0 and lse = -inf for the rank's rows (the empty merge).
__global__ void clear_rows_kernel(float *o, float *lse, size_t rows, int dv, unsigned long long *hbm)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x, first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t i = first; i < rows * dv; i += stride)
        o[i] = 0.0f;
    for (size_t i = first; i < rows; i += stride)
        lse[i] = -INFINITY;
    if (first == 0)
        hbm_dev_add(hbm, HBM_WRITTEN, (unsigned long long)rows * (dv + 1) * sizeof(float));
}

// ==== the backward step ==========================================================================
//
// Stage 08's K/V-tile kernel over one step: one block per key tile of the held shard (key chunk 0's
// tiles, then chunk 1's) walks the rank's query tiles that see the tile (query chunk 0's, then
// chunk 1's, each the packed rows of the kv head's group), with P = exp(S - lse) recomputed from
// the final lse of the forward:
//   dV_j = sum_i P_ij^T dO_i     dK_j = scale sum_i dS_ij^T Q_i     dQ_i += scale dS_ij K_j (atomics)
//   dS = P ∘ (dP - D),  dP = dO V^T
// dK_j and dV_j are this rank's part for this step: written (not added) into dkv_step, where fold
// adds them to the gradients that travel. Key tiles no query of the rank sees get zeros.

struct BwdStep {
    const float *q[2], *dO[2], *lse[2], *D[2]; // the rank's query chunks, packed rows as in FwdStep
    float *dq[2];
    int R[2];
    const float *k[2], *v[2]; // the held shard's key chunks
    float *dK[2], *dV[2];     // this step's dK, dV of those keys (dkv_step)
    int m[2];
    int key_tiles0; // key tiles of key chunk 0: blocks y < key_tiles0 work on chunk 0
    Causal causal[2][2];
    int d, dv;
    float scale, scale_log2;
    bool vec_qk, vec_v, vec_dq, vec_dk, vec_dv;
    unsigned long long *hbm;
};

// Before the backward's steps: D = rowsum(dO ∘ O) and dq = 0 for the rank's rows, one warp a row.
__global__ void prepare_grads_kernel(const float *dout, const float *o, float *D, float *dq, long long rows, int d,
                                     int dv, unsigned long long *hbm)
{
    const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    float acc = 0.0f;
    for (int c = lane; c < dv; c += 32)
        acc = fmaf(dout[row * dv + c], o[row * dv + c], acc);
    for (int c = lane; c < d; c += 32)
        dq[row * d + c] = 0.0f;
    acc = row_sum<32>(acc);
    if (lane == 0) {
        D[row] = acc;
        hbm_dev_add(hbm, HBM_READ, 2ull * dv * sizeof(float));
        hbm_dev_add(hbm, HBM_WRITTEN, (1ull + d) * sizeof(float));
    }
}

// Q_i, dO_i, lse_i and D_i of one query tile of chunk qw (rows_q packed rows from row0).
template <class T>
__device__ __forceinline__ void load_query_tile(const BwdSmem<T> &sm, const BwdStep &a, int qw, size_t row0,
                                                int rows_q, int tid)
{
    load_tile<T::BR, T::D, T::QS, T::NT>(sm.Qs, a.q[qw] + row0 * a.d, rows_q, a.d, a.vec_qk, tid);
    load_tile<T::BR, T::D, T::QS, T::NT>(sm.dOs, a.dO[qw] + row0 * a.dv, rows_q, a.dv, a.vec_v, tid);
    load_vector<T::BR, T::NT>(sm.Ls, a.lse[qw] + row0, rows_q, tid);
    load_vector<T::BR, T::NT>(sm.Ds, a.D[qw] + row0, rows_q, tid);
    cp_async_commit();
    if (tid == 0)
        hbm_dev_add(a.hbm, HBM_READ, (unsigned long long)rows_q * (a.d + a.dv + 2) * sizeof(float));
}

// Step 1 of a (Q_i, K_j) tile pair: half 0 writes P^T, half 1 returns dP in dp. Keys past rows_kv
// and, in a tile that crosses the chunk pair's diagonal, keys past the row's position get P = 0.
template <class T>
__device__ __forceinline__ void p_and_dp(const BwdSmem<T> &sm, const BwdStep &a, const Causal &c, int half, int q0,
                                         int rows_q, int kv0, int rows_kv, int srg, int scg,
                                         float (&dp)[T::STM][T::STN])
{
    zero(dp);
    if (half == 1) {
        mma_abt<T::STM, T::STN, T::SRG, T::SCG, T::D, T::QS, T::QS>(dp, sm.dOs, sm.Vs, srg, scg);
        return;
    }
    float s[T::STM][T::STN];
    zero(s);
    mma_abt<T::STM, T::STN, T::SRG, T::SCG, T::D, T::QS, T::QS>(s, sm.Qs, sm.Ks, srg, scg);
    const bool cross = crosses(c, q0, rows_q, kv0, rows_kv);
#pragma unroll
    for (int i = 0; i < T::STM; i++) {
        const int r = srg + T::SRG * i;
        int seen = 0; // rows past the tile's rows see nothing
        if (r < rows_q)
            seen = cross ? seen_in_tile(c, q0 + r, kv0, rows_kv) : rows_kv;
        const float lse2 = sm.Ls[r] * kLog2e;
#pragma unroll
        for (int j = 0; j < T::STN; j++) {
            const int col = scg + T::SCG * j;
            sm.PTs[col * T::PTS + r] = col < seen ? exp2f(s[i][j] * a.scale_log2 - lse2) : 0.0f;
        }
    }
}

// Step 2, half 1, once P^T is visible: dS = P ∘ (dP - D) into dS^T and dS.
template <class T>
__device__ __forceinline__ void ds_from_p(const BwdSmem<T> &sm, int srg, int scg, const float (&dp)[T::STM][T::STN])
{
#pragma unroll
    for (int i = 0; i < T::STM; i++) {
        const int r = srg + T::SRG * i;
        const float Dr = sm.Ds[r];
#pragma unroll
        for (int j = 0; j < T::STN; j++) {
            const int col = scg + T::SCG * j;
            /* exercise: begin — dS = P ∘ (dP - D) (check 13 --device cuda: dq and dk) | stub: const float ds = sm.PTs[col * T::PTS + r] * dp[i][j] + 0.0f * Dr; */
            const float ds = sm.PTs[col * T::PTS + r] * (dp[i][j] - Dr);
            /* exercise: end */
            sm.dSTs[col * T::PTS + r] = ds;
            sm.dSs[r * T::DSS + col] = ds;
        }
    }
}

template <class T> __global__ void __launch_bounds__(T::NT, T::MINB) step_backward_kernel(BwdStep a)
{
    extern __shared__ float4 smem4[];
    const BwdSmem<T> sm(reinterpret_cast<float *>(smem4));
    const int tid = threadIdx.x, half = tid / T::HALF, ht = tid % T::HALF;
    const int srg = ht / T::SCG, scg = ht % T::SCG;   // scores, within a half
    const int org = ht / T::OCG, ocg = ht % T::OCG;   // dV_j / dK_j, within a half
    const int qrg = tid / T::QCG, qcg = tid % T::QCG; // dQ_i, whole block
    const int g = blockIdx.x, y = (int)blockIdx.y;
    const int kw = y < a.key_tiles0 ? 0 : 1;
    const int kv0 = (y - (kw == 1 ? a.key_tiles0 : 0)) * T::BC;
    const int rows_tile = min(T::BC, a.m[kw] - kv0);
    const size_t kv_row0 = (size_t)g * a.m[kw] + kv0;

    // The keys of the tile some query of the rank sees: up to what the last row of each query chunk
    // sees. Only those are loaded; the rest of the tile gets zero gradients.
    int key_end = 0;
#pragma unroll
    for (int qw = 0; qw < 2; qw++)
        if (a.R[qw] > 0)
            key_end = max(key_end, keys_seen(a.causal[qw][kw], a.R[qw] - 1));
    const int rows_kv = max(0, min(rows_tile, key_end - kv0));

    // The walk: the query tiles with a row that sees key kv0, chunk 0's then chunk 1's. Returns the
    // chunk of the next such tile at or after packed row `from` of chunk qw (2: none) and its start.
    auto next_tile = [&](int qw, int from, int &q0) {
        for (; qw < 2; qw++, from = 0)
            if (a.R[qw] > 0) {
                q0 = next_tile_seeing(a.causal[qw][kw], from, T::BR, a.R[qw], kv0);
                if (q0 < a.R[qw])
                    return qw;
            }
        return 2;
    };

    float4 acc[T::KTM][T::OQ]; // half 0: dV_j;  half 1: dK_j   (Bc, D)
    zero(acc);
    if (rows_kv > 0) {
        load_tile<T::BC, T::D, T::QS, T::NT>(sm.Ks, a.k[kw] + kv_row0 * a.d, rows_kv, a.d, a.vec_qk, tid);
        load_tile<T::BC, T::D, T::QS, T::NT>(sm.Vs, a.v[kw] + kv_row0 * a.dv, rows_kv, a.dv, a.vec_v, tid);
        cp_async_commit();
        if (tid == 0)
            hbm_dev_add(a.hbm, HBM_READ, (unsigned long long)rows_kv * (a.d + a.dv) * sizeof(float));
        int q0 = 0;
        int qw = next_tile(0, 0, q0);
        if (qw < 2)
            load_query_tile(sm, a, qw, (size_t)g * a.R[qw] + q0, min(T::BR, a.R[qw] - q0), tid);
        while (qw < 2) {
            const int rows_q = min(T::BR, a.R[qw] - q0);
            int q_next = 0;
            const int qw_next = next_tile(qw, q0 + T::BR, q_next);
            cp_async_wait<0>();
            __syncthreads(); // Q_i, dO_i (and K_j, V_j) have landed

            float dp[T::STM][T::STN];
            p_and_dp(sm, a, a.causal[qw][kw], half, q0, rows_q, kv0, rows_kv, srg, scg, dp);
            __syncthreads(); // P^T visible
            if (half == 1)
                ds_from_p(sm, srg, scg, dp);
            __syncthreads(); // dS^T and dS visible

            if (half == 0) // dV_j += P_ij^T dO_i   (Bc, dv)
                mma_ab<T::KTM, T::OQ, T::ORG, T::OCG, T::BR, T::PTS, T::QS>(acc, sm.PTs, sm.dOs, org, ocg);
            else // dK_j += dS_ij^T Q_i   (Bc, d), scaled at the end
                mma_ab<T::KTM, T::OQ, T::ORG, T::OCG, T::BR, T::PTS, T::QS>(acc, sm.dSTs, sm.Qs, org, ocg);
            __syncthreads(); // Q_i, dO_i free: the next query tile streams in during dQ

            if (qw_next < 2)
                load_query_tile(sm, a, qw_next, (size_t)g * a.R[qw_next] + q_next, min(T::BR, a.R[qw_next] - q_next),
                                tid);

            // dQ_i += scale dS_ij K_j   (Br, d): into the rank's dq, one atomic read-modify-write each
            float4 dq[T::QTM][T::QQ];
            zero(dq);
            mma_ab<T::QTM, T::QQ, T::QRG, T::QCG, T::BC, T::DSS, T::QS>(dq, sm.dSs, sm.Ks, qrg, qcg);
            const size_t q_row0 = (size_t)g * a.R[qw] + q0;
#pragma unroll
            for (int i = 0; i < T::QTM; i++) {
                const int r = qrg + T::QRG * i;
                if (r < rows_q)
                    atomic_add_row<T::QQ, T::QCG>(a.dq[qw] + (q_row0 + r) * a.d, dq[i], a.scale, a.d, a.vec_dq, qcg);
            }
            if (tid == 0) {
                const unsigned long long bytes = (unsigned long long)rows_q * a.d * sizeof(float);
                hbm_dev_add(a.hbm, HBM_READ, bytes);
                hbm_dev_add(a.hbm, HBM_WRITTEN, bytes);
            }
            qw = qw_next;
            q0 = q_next;
        }
        cp_async_wait<0>();
    }

    // This step's dV_j, and dK_j = scale dS^T Q, written once over the whole tile
#pragma unroll
    for (int i = 0; i < T::KTM; i++) {
        const int r = org + T::ORG * i;
        if (r >= rows_tile)
            continue;
        if (half == 0)
            store_row<T::OQ, T::OCG>(a.dV[kw] + (kv_row0 + r) * a.dv, acc[i], 1.0f, a.dv, a.vec_dv, ocg);
        else
            store_row<T::OQ, T::OCG>(a.dK[kw] + (kv_row0 + r) * a.d, acc[i], a.scale, a.d, a.vec_dk, ocg);
    }
    if (tid == 0)
        hbm_dev_add(a.hbm, HBM_WRITTEN, (unsigned long long)rows_tile * (a.d + a.dv) * sizeof(float));
}

// Stage 08's backward tiles (BwdConfig, common/cuda_fa2_tiles.cuh). The HBM model assumes Bc = 64.
#define RING_BWD_BLOCK_C 64

template <class T>
int step_backward_launch(const BwdStep &a, int heads, int key_tiles, cudaStream_t stream, FlError *err)
{
    static_assert(T::BC == RING_BWD_BLOCK_C, "the host sizes the grid with RING_BWD_BLOCK_C");
    const dim3 grid((unsigned)heads, (unsigned)key_tiles);
    return launch_with_smem(step_backward_kernel<T>, grid, T::NT, T::SMEM_BYTES, stream, a, "step_backward_kernel",
                            err);
}

// The fold: the gradients of the held shard so far plus this step's part, out = in + step (in =
// NULL at step 0: nothing has come yet). dK and dV separately (n_k, n_v floats).
__global__ void fold_kernel(float *out_k, float *out_v, const float *step_k, const float *step_v, const float *in_k,
                            const float *in_v, size_t n_k, size_t n_v, unsigned long long *hbm)
{
    const size_t n = n_k + n_v, stride = (size_t)gridDim.x * blockDim.x;
    const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t i = first; i < n; i += stride) {
        const bool is_k = i < n_k;
        const size_t j = is_k ? i : i - n_k;
        float x = is_k ? step_k[j] : step_v[j];
        if (in_k)
            x += is_k ? in_k[j] : in_v[j];
        (is_k ? out_k : out_v)[j] = x;
    }
    if (first == 0) {
        hbm_dev_add(hbm, HBM_READ, (unsigned long long)n * (in_k ? 2 : 1) * sizeof(float));
        hbm_dev_add(hbm, HBM_WRITTEN, (unsigned long long)n * sizeof(float));
    }
}

// A grid of at most `cap` blocks of 256 threads over n elements (at least one block).
unsigned grid_for(size_t n, unsigned cap)
{
    const size_t blocks = (n + 255) / 256;
    return blocks == 0 ? 1 : blocks < cap ? (unsigned)blocks : cap;
}

// ==== a rank and the ring ========================================================================

// The sizes every rank agrees on.
struct Ring {
    int P;
    const AttnProblem *p;
    size_t group, G, GQ; // Hq / Hkv; kv heads B Hkv; query heads B Hq
};

Ring ring_of(const AttnProblem *p, int P)
{
    Ring g;
    g.P = P, g.p = p;
    g.group = (size_t)(p->Hq / p->Hkv), g.G = (size_t)p->B * p->Hkv, g.GQ = (size_t)p->B * p->Hq;
    return g;
}

int ranks_of(const RunCtx *ctx) { return ctx->ranks > 0 ? ctx->ranks : 1; }

// Rows of rank o's shard (its two key chunks of every kv head), and of its query share.
size_t shard_rows(const Ring &g, int o)
{
    const RankRows x = rank_rows(g.p->Tq, g.p->Tk, g.P, o);
    return rows_of(x.k) * g.G;
}

size_t query_rows(const Ring &g, int r)
{
    const RankRows x = rank_rows(g.p->Tq, g.p->Tk, g.P, r);
    return rows_of(x.q) * g.GQ;
}

size_t round_floats(size_t n) { return (n + 63) / 64 * 64; } // 256-byte steps

// A rank's ring buffers (its workspace), sized for the largest shard and the largest query share:
//   kv[0], kv[1]                 shards that arrive: K, then V right after it
//   backward: D (its rows), dkv_step (this step's dK, dV), acc_in, acc_out (dK, dV travelling)
struct RingBuffers {
    float *kv[2];
    float *D, *dkv_step, *acc_in, *acc_out;
};

size_t ring_buffers(const Ring &g, Direction dir, float *base, RingBuffers *b)
{
    size_t shard = 0, query = 0;
    for (int r = 0; r < g.P; r++) {
        shard = shard_rows(g, r) > shard ? shard_rows(g, r) : shard;
        query = query_rows(g, r) > query ? query_rows(g, r) : query;
    }
    const size_t kv = round_floats(shard * (size_t)(g.p->d + g.p->dv)), rows = round_floats(query);
    size_t at = 0;
    auto take = [&](size_t n) {
        float *x = base ? base + at : nullptr;
        at += n;
        return x;
    };
    RingBuffers x = {{nullptr, nullptr}, nullptr, nullptr, nullptr, nullptr};
    x.kv[0] = take(kv);
    x.kv[1] = take(kv);
    if (dir == DIR_BWD) {
        x.D = take(rows);
        x.dkv_step = take(kv);
        x.acc_in = take(kv);
        x.acc_out = take(kv);
    }
    if (b)
        *b = x;
    return at;
}

size_t ring_workspace_bytes(const AttnProblem *p, const RunCtx *ctx, Direction dir)
{
    if (p->Hkv <= 0 || p->Hq % p->Hkv != 0)
        return 0;
    return ring_buffers(ring_of(p, ranks_of(ctx)), dir, nullptr, nullptr) * sizeof(float);
}

// One rank of the ring, as the host drives it.
struct Rank {
    int r, device;
    ncclComm_t comm;
    cudaStream_t compute, link;
    cudaEvent_t ready, full[2], freed[2], folded, acc_arrived, done; // the schedule (file header)
    cudaEvent_t *marks;  // timing: begin and end of each stretch of compute work, or NULL
    int spans;           // stretches marked so far
    RankRows rows;
    // Its share (split.h), on its GPU.
    const float *q, *k, *v, *dO; // k, v: its own shard, read in place at step 0
    float *o, *lse, *dq, *dk, *dv; // dk, dv: where its own keys' gradients land at the end
    RingBuffers buf;
    unsigned long long *hbm; // its counter [read, written], or NULL
    uint64_t sent, received; // link bytes, counted as the transfers are posted
};

int rank_of(int r, int P) { return ((r % P) + P) % P; }

// A shard: whose it is and where its K and V are.
struct Shard {
    int owner;
    const float *k, *v;
};

// What rank x holds at step s: its own shard at s = 0, then the one that arrived in kv[s % 2].
Shard held_shard(const Ring &g, const Rank &x, int s)
{
    Shard h;
    h.owner = rank_of(x.r - s, g.P);
    if (s == 0) {
        h.k = x.k, h.v = x.v;
    } else {
        h.k = x.buf.kv[s % 2];
        h.v = h.k + shard_rows(g, h.owner) * g.p->d;
    }
    return h;
}

// Stage 08's vector rule: 16-byte copies where the width allows and every pointer is aligned.
bool aligned16(const void *x) { return ((uintptr_t)x & 15u) == 0; }

// mask.h's chunk pairs of rank x's query chunks against the held shard's key chunks.
void set_causal(const Ring &g, const Rank &x, const RankRows &held, Causal (&c)[2][2])
{
    for (int qw = 0; qw < 2; qw++)
        for (int kw = 0; kw < 2; kw++)
            c[qw][kw] = causal_pair(g.p->causal, g.p->Tq, g.p->Tk, (int)x.rows.q[qw].lo,
                                    (int)(x.rows.q[qw].hi - x.rows.q[qw].lo), (int)held.k[kw].lo,
                                    (int)(held.k[kw].hi - held.k[kw].lo));
}

int padded_dim(const AttnProblem *p)
{
    const int x = p->d > p->dv ? p->d : p->dv;
    return (x + 31) / 32 * 32;
}

// Step s of rank x, forward: its queries against the held shard, merged into o and lse.
int step_forward(const Ring &g, const Rank &x, const Shard &h, FlError *err)
{
    const AttnProblem *p = g.p;
    const RankRows held = rank_rows(p->Tq, p->Tk, g.P, h.owner);
    FwdStep a;
    for (int qw = 0; qw < 2; qw++) {
        a.q[qw] = x.q + share_offset(x.rows.q, qw, g.GQ, (size_t)p->d);
        a.o[qw] = x.o + share_offset(x.rows.q, qw, g.GQ, (size_t)p->dv);
        a.lse[qw] = x.lse + share_offset(x.rows.q, qw, g.GQ, 1);
        a.R[qw] = (int)(g.group * (x.rows.q[qw].hi - x.rows.q[qw].lo));
        a.tiles[qw] = ceil_div(a.R[qw], FA2_BLOCK_R);
    }
    for (int kw = 0; kw < 2; kw++) {
        a.k[kw] = h.k + share_offset(held.k, kw, g.G, (size_t)p->d);
        a.v[kw] = h.v + share_offset(held.k, kw, g.G, (size_t)p->dv);
        a.m[kw] = (int)(held.k[kw].hi - held.k[kw].lo);
    }
    set_causal(g, x, held, a.causal);
    a.d = p->d, a.dv = p->dv;
    a.scale_log2 = p->scale * kLog2e;
    a.vec_qk = p->d % 4 == 0, a.vec_v = p->dv % 4 == 0, a.vec_o = p->dv % 4 == 0;
    for (int w = 0; w < 2; w++) {
        a.vec_qk = a.vec_qk && aligned16(a.q[w]) && aligned16(a.k[w]);
        a.vec_v = a.vec_v && aligned16(a.v[w]);
        a.vec_o = a.vec_o && aligned16(a.o[w]);
    }
    a.hbm = x.hbm;
    if (a.tiles[0] + a.tiles[1] == 0 || g.G == 0)
        return FL_OK;
    if (a.tiles[0] + a.tiles[1] > 65535)
        return fl_fail(err, FL_BAD_INPUT, "ring: %d query tiles per kv head on rank %d; the grid holds 65535",
                       a.tiles[0] + a.tiles[1], x.r);
    switch (padded_dim(p)) {
    case 32: return step_forward_launch<FA2_CONFIG_D32>(a, (int)g.G, x.compute, err);
    case 64: return step_forward_launch<FA2_CONFIG_D64>(a, (int)g.G, x.compute, err);
    case 96: return step_forward_launch<FA2_CONFIG_D96>(a, (int)g.G, x.compute, err);
    default: return step_forward_launch<FA2_CONFIG_D128>(a, (int)g.G, x.compute, err);
    }
}

// Step s of rank x, backward: its share of dK, dV of the held shard into dkv_step, dS K into dq.
int step_backward(const Ring &g, const Rank &x, const Shard &h, FlError *err)
{
    const AttnProblem *p = g.p;
    const RankRows held = rank_rows(p->Tq, p->Tk, g.P, h.owner);
    const size_t S = shard_rows(g, h.owner);
    BwdStep a;
    for (int qw = 0; qw < 2; qw++) {
        a.q[qw] = x.q + share_offset(x.rows.q, qw, g.GQ, (size_t)p->d);
        a.dO[qw] = x.dO + share_offset(x.rows.q, qw, g.GQ, (size_t)p->dv);
        a.lse[qw] = x.lse + share_offset(x.rows.q, qw, g.GQ, 1);
        a.D[qw] = x.buf.D + share_offset(x.rows.q, qw, g.GQ, 1);
        a.dq[qw] = x.dq + share_offset(x.rows.q, qw, g.GQ, (size_t)p->d);
        a.R[qw] = (int)(g.group * (x.rows.q[qw].hi - x.rows.q[qw].lo));
    }
    int key_tiles[2];
    for (int kw = 0; kw < 2; kw++) {
        a.k[kw] = h.k + share_offset(held.k, kw, g.G, (size_t)p->d);
        a.v[kw] = h.v + share_offset(held.k, kw, g.G, (size_t)p->dv);
        a.dK[kw] = x.buf.dkv_step + share_offset(held.k, kw, g.G, (size_t)p->d);
        a.dV[kw] = x.buf.dkv_step + S * p->d + share_offset(held.k, kw, g.G, (size_t)p->dv);
        a.m[kw] = (int)(held.k[kw].hi - held.k[kw].lo);
        key_tiles[kw] = ceil_div(a.m[kw], RING_BWD_BLOCK_C);
    }
    a.key_tiles0 = key_tiles[0];
    set_causal(g, x, held, a.causal);
    a.d = p->d, a.dv = p->dv;
    a.scale = p->scale, a.scale_log2 = p->scale * kLog2e;
    a.vec_qk = a.vec_dq = a.vec_dk = p->d % 4 == 0;
    a.vec_v = a.vec_dv = p->dv % 4 == 0;
    for (int w = 0; w < 2; w++) {
        a.vec_qk = a.vec_qk && aligned16(a.q[w]) && aligned16(a.k[w]);
        a.vec_v = a.vec_v && aligned16(a.v[w]) && aligned16(a.dO[w]);
        a.vec_dq = a.vec_dq && aligned16(a.dq[w]);
        a.vec_dk = a.vec_dk && aligned16(a.dK[w]);
        a.vec_dv = a.vec_dv && aligned16(a.dV[w]);
    }
    a.hbm = x.hbm;
    const int tiles = key_tiles[0] + key_tiles[1];
    if (tiles == 0 || g.G == 0)
        return FL_OK;
    if (tiles > 65535)
        return fl_fail(err, FL_BAD_INPUT, "ring: %d key tiles per kv head on rank %d; the grid holds 65535", tiles,
                       x.r);
    switch (padded_dim(p)) {
    case 32: return step_backward_launch<BwdConfig<32>>(a, (int)g.G, tiles, x.compute, err);
    case 64: return step_backward_launch<BwdConfig<64>>(a, (int)g.G, tiles, x.compute, err);
    case 96: return step_backward_launch<BwdConfig<96>>(a, (int)g.G, tiles, x.compute, err);
    default: return step_backward_launch<BwdConfig<128>>(a, (int)g.G, tiles, x.compute, err);
    }
}

// The fold of step s on rank x: acc_out (or, with one rank, dk and dv at home) = acc_in + dkv_step.
int fold(const Ring &g, const Rank &x, int s, FlError *err)
{
    const AttnProblem *p = g.p;
    const size_t S = shard_rows(g, rank_of(x.r - s, g.P)), n_k = S * p->d, n_v = S * p->dv;
    float *out_k = g.P == 1 ? x.dk : x.buf.acc_out, *out_v = g.P == 1 ? x.dv : x.buf.acc_out + n_k;
    const float *in_k = s == 0 ? nullptr : x.buf.acc_in, *in_v = s == 0 ? nullptr : x.buf.acc_in + n_k;
    fold_kernel<<<grid_for(n_k + n_v, 1024), 256, 0, x.compute>>>(out_k, out_v, x.buf.dkv_step,
                                                                    x.buf.dkv_step + n_k, in_k, in_v, n_k, n_v, x.hbm);
    return fl_cuda_launch_status("fold_kernel", err);
}

// Before the steps: the forward's o = 0, lse = -inf, or the backward's D and dq = 0.
int prologue(const Ring &g, const Rank &x, Direction dir, FlError *err)
{
    const AttnProblem *p = g.p;
    const size_t rows = query_rows(g, x.r);
    if (dir == DIR_FWD) {
        clear_rows_kernel<<<grid_for(rows * p->dv, 1024), 256, 0, x.compute>>>(x.o, x.lse, rows, p->dv, x.hbm);
        return fl_cuda_launch_status("clear_rows_kernel", err);
    }
    if (rows == 0)
        return FL_OK;
    prepare_grads_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, x.compute>>>(x.dO, x.o, x.buf.D, x.dq,
                                                                          (long long)rows, p->d, p->dv, x.hbm);
    return fl_cuda_launch_status("prepare_grads_kernel", err);
}

// Posts rank x's send of n floats to rank r + 1 (inside a group), counting the bytes.
int send_next(const Ring &g, Rank &x, const float *buf, size_t n, FlError *err)
{
    if (n == 0)
        return FL_OK;
    x.sent += n * sizeof(float);
    return nccl_status(ncclSend(buf, n, ncclFloat32, rank_of(x.r + 1, g.P), x.comm, x.link), "ncclSend", err);
}

int recv_prev(const Ring &g, Rank &x, float *buf, size_t n, FlError *err)
{
    if (n == 0)
        return FL_OK;
    x.received += n * sizeof(float);
    return nccl_status(ncclRecv(buf, n, ncclFloat32, rank_of(x.r - 1, g.P), x.comm, x.link), "ncclRecv", err);
}

// One NCCL group over the local ranks: each sends and receives what post(x) posts.
template <class Post> int link_group(Rank *ranks, int n, Post post, FlError *err)
{
    int rc = nccl_status(ncclGroupStart(), "ncclGroupStart", err);
    for (int i = 0; rc == FL_OK && i < n; i++)
        rc = post(ranks[i]);
    const int end = nccl_status(ncclGroupEnd(), "ncclGroupEnd", rc == FL_OK ? err : nullptr);
    return rc == FL_OK ? end : rc;
}

int wait(cudaStream_t stream, cudaEvent_t event, FlError *err)
{
    return fl_cuda_status(cudaStreamWaitEvent(stream, event, 0), "ordering the ring's streams", err);
}

int record(cudaEvent_t event, cudaStream_t stream, FlError *err)
{
    return fl_cuda_status(cudaEventRecord(event, stream), "recording a ring event", err);
}

int use_device(const Rank &x, FlError *err) { return fl_cuda_status(cudaSetDevice(x.device), "cudaSetDevice", err); }

// A new event recorded on the legacy default stream of the current device: it stands for all the
// caller has queued there (uploads, poisoning, zeroing a counter). The ranks' streams are
// non-blocking, so they run after that work only if they wait for this event: a cudaMemset, or a
// cudaMemcpy from pageable memory, may return before its bytes have landed.
int caller_work_done(cudaEvent_t *event, FlError *err)
{
    int rc = fl_cuda_status(cudaEventCreateWithFlags(event, cudaEventDisableTiming), "creating an event", err);
    return rc == FL_OK ? record(*event, 0, err) : rc;
}

// Timing marks: marks 2i and 2i + 1 bound the i-th stretch of kernels on the compute stream (the
// prologue, each step kernel, each fold), so that waits between them are not counted.
int max_spans(int P) { return 1 + 2 * P; }

int span_begin(const Rank &x, FlError *err) { return x.marks ? record(x.marks[2 * x.spans], x.compute, err) : FL_OK; }

int span_end(Rank &x, FlError *err)
{
    if (!x.marks)
        return FL_OK;
    return record(x.marks[2 * x.spans++ + 1], x.compute, err);
}

// The pass over the ring: the schedule of the file header, for the n ranks this process drives.
int ring_pass(const Ring &g, Rank *ranks, int n, Direction dir, FlError *err)
{
    const int P = g.P;
    const bool bwd = dir == DIR_BWD;
    const size_t d = (size_t)g.p->d, dv = (size_t)g.p->dv;
    int rc = FL_OK;
    for (int i = 0; rc == FL_OK && i < n; i++) {
        Rank &x = ranks[i];
        rc = use_device(x, err);
        // Compute already waits for the rank's inputs (the caller's uploads, mode A's scatter); the
        // link stream, whose first send reads the own K/V shard and whose last receive overwrites
        // the poisoned dk, dv, waits for the same point.
        if (rc == FL_OK)
            rc = record(x.ready, x.compute, err);
        if (rc == FL_OK)
            rc = wait(x.link, x.ready, err);
        if (rc == FL_OK)
            rc = span_begin(x, err);
        if (rc == FL_OK)
            rc = prologue(g, x, dir, err);
        if (rc == FL_OK)
            rc = span_end(x, err);
    }
    for (int s = 0; s < P && rc == FL_OK; s++) {
        // Compute: once the held shard has arrived, this step's kernels (and the backward's fold).
        for (int i = 0; rc == FL_OK && i < n; i++) {
            Rank &x = ranks[i];
            const Shard h = held_shard(g, x, s);
            rc = use_device(x, err);
            if (rc == FL_OK && s >= 1)
                rc = wait(x.compute, x.full[s % 2], err);
            if (rc == FL_OK)
                rc = span_begin(x, err);
            if (rc == FL_OK)
                rc = bwd ? step_backward(g, x, h, err) : step_forward(g, x, h, err);
            if (rc == FL_OK)
                rc = span_end(x, err);
            if (rc == FL_OK)
                rc = record(x.freed[s % 2], x.compute, err);
            if (rc == FL_OK && bwd && s >= 1 && P > 1)
                rc = wait(x.compute, x.acc_arrived, err);
            if (rc == FL_OK && bwd)
                rc = span_begin(x, err);
            if (rc == FL_OK && bwd)
                rc = fold(g, x, s, err);
            if (rc == FL_OK && bwd)
                rc = span_end(x, err);
            if (rc == FL_OK && bwd)
                rc = record(x.folded, x.compute, err);
        }
        // Link: the held K/V shard goes on to rank r + 1 while this step computes; the shard for
        // step s + 1 arrives from rank r - 1 into the buffer step s - 1 read.
        if (s < P - 1) {
            for (int i = 0; rc == FL_OK && i < n; i++) {
                rc = use_device(ranks[i], err);
                if (rc == FL_OK && s >= 2)
                    rc = wait(ranks[i].link, ranks[i].freed[(s + 1) % 2], err);
            }
            if (rc == FL_OK)
                rc = link_group(ranks, n, [&](Rank &x) {
                    const Shard h = held_shard(g, x, s);
                    const size_t out = shard_rows(g, h.owner), in = shard_rows(g, rank_of(x.r - s - 1, P));
                    float *inbox = x.buf.kv[(s + 1) % 2];
                    int r = send_next(g, x, h.k, out * d, err);
                    if (r == FL_OK)
                        r = send_next(g, x, h.v, out * dv, err);
                    if (r == FL_OK)
                        r = recv_prev(g, x, inbox, in * d, err);
                    if (r == FL_OK)
                        r = recv_prev(g, x, inbox + in * d, in * dv, err);
                    return r;
                }, err);
            for (int i = 0; rc == FL_OK && i < n; i++) {
                rc = use_device(ranks[i], err);
                if (rc == FL_OK)
                    rc = record(ranks[i].full[(s + 1) % 2], ranks[i].link, err);
            }
        }
        // Link, backward: the folded dK, dV go on to rank r + 1 while step s + 1 computes; the ones
        // of the next step's shard arrive (at the last step: this rank's own, home, into dk, dv).
        if (bwd && P > 1) {
            for (int i = 0; rc == FL_OK && i < n; i++) {
                rc = use_device(ranks[i], err);
                if (rc == FL_OK)
                    rc = wait(ranks[i].link, ranks[i].folded, err);
            }
            if (rc == FL_OK)
                rc = link_group(ranks, n, [&](Rank &x) {
                    const size_t out = shard_rows(g, rank_of(x.r - s, P)), in = shard_rows(g, rank_of(x.r - s - 1, P));
                    const bool home = s == P - 1;
                    float *in_k = home ? x.dk : x.buf.acc_in, *in_v = home ? x.dv : x.buf.acc_in + in * d;
                    int r = send_next(g, x, x.buf.acc_out, out * d, err);
                    if (r == FL_OK)
                        r = send_next(g, x, x.buf.acc_out + out * d, out * dv, err);
                    if (r == FL_OK)
                        r = recv_prev(g, x, in_k, in * d, err);
                    if (r == FL_OK)
                        r = recv_prev(g, x, in_v, in * dv, err);
                    return r;
                }, err);
            for (int i = 0; rc == FL_OK && i < n; i++) {
                rc = use_device(ranks[i], err);
                if (rc == FL_OK)
                    rc = record(ranks[i].acc_arrived, ranks[i].link, err);
            }
        }
    }
    // The end: compute waits for the link stream's last transfer, so that whatever comes next on
    // compute (mode A's gather) sees the gradients that came home.
    for (int i = 0; rc == FL_OK && i < n; i++) {
        Rank &x = ranks[i];
        rc = use_device(x, err);
        if (rc == FL_OK)
            rc = record(x.done, x.link, err);
        if (rc == FL_OK)
            rc = wait(x.compute, x.done, err);
    }
    return rc;
}

// ---- a rank's streams, events and counter ------------------------------------------------------

// Creates rank x's streams and events on its device (and its counter when counting, its timing
// marks when timing). Non-blocking streams: the legacy default stream must not order them.
int rank_open(const Ring &g, Rank &x, bool counting, bool timing, FlError *err)
{
    int rc = use_device(x, err);
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaStreamCreateWithFlags(&x.compute, cudaStreamNonBlocking), "creating a stream", err);
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaStreamCreateWithFlags(&x.link, cudaStreamNonBlocking), "creating a stream", err);
    cudaEvent_t *sync_events[] = {&x.ready,   &x.full[0], &x.full[1],      &x.freed[0],
                                  &x.freed[1], &x.folded,  &x.acc_arrived, &x.done};
    for (cudaEvent_t *e : sync_events)
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "creating an event", err);
    if (rc == FL_OK && counting) {
        rc = fl_cuda_alloc_bytes((void **)&x.hbm, 2 * sizeof(unsigned long long), "a rank's HBM counter", err);
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaMemsetAsync(x.hbm, 0, 2 * sizeof(unsigned long long), x.compute),
                                "zeroing a rank's HBM counter", err);
    }
    if (rc == FL_OK && timing) {
        const int n = 2 * max_spans(g.P);
        x.marks = (cudaEvent_t *)calloc((size_t)n, sizeof(cudaEvent_t));
        if (!x.marks)
            rc = fl_fail(err, FL_BAD_INPUT, "ring: out of host memory for timing events");
        for (int i = 0; rc == FL_OK && i < n; i++)
            rc = fl_cuda_status(cudaEventCreate(&x.marks[i]), "creating a timing event", err);
    }
    return rc;
}

// Waits for rank x's work, adds what it counted to *out (when given), and frees what rank_open
// made. Safe on a partly opened rank; the first error wins.
int rank_close(const Ring &g, Rank &x, RankCounter *out, unsigned long long total[2], int rc, FlError *err)
{
    FlError *first = rc == FL_OK ? err : nullptr; // an earlier error keeps its message
    int status = fl_cuda_status(cudaSetDevice(x.device), "cudaSetDevice", first);
    if (x.compute && status == FL_OK)
        status = fl_cuda_status(cudaStreamSynchronize(x.compute), "the ring's compute stream", first);
    if (x.link && status == FL_OK)
        status = fl_cuda_status(cudaStreamSynchronize(x.link), "the ring's link stream", first);
    if (rc == FL_OK && status == FL_OK) {
        unsigned long long counted[2] = {0, 0};
        if (x.hbm)
            status = fl_cuda_status(cudaMemcpy(counted, x.hbm, sizeof counted, cudaMemcpyDeviceToHost),
                                    "reading a rank's HBM counter", err);
        double ms = 0.0;
        for (int i = 0; status == FL_OK && x.marks && i < x.spans; i++) {
            float span = 0.0f;
            status = fl_cuda_status(cudaEventElapsedTime(&span, x.marks[2 * i], x.marks[2 * i + 1]),
                                    "reading a timing event", err);
            ms += span;
        }
        if (status == FL_OK && out) {
            out->hbm.bytes_read += counted[HBM_READ];
            out->hbm.bytes_written += counted[HBM_WRITTEN];
            out->link_sent += x.sent;
            out->link_received += x.received;
            out->compute_ms += ms;
        }
        total[HBM_READ] += counted[HBM_READ];
        total[HBM_WRITTEN] += counted[HBM_WRITTEN];
    }
    if (x.marks) {
        for (int i = 0; i < 2 * max_spans(g.P); i++)
            if (x.marks[i])
                cudaEventDestroy(x.marks[i]);
        free(x.marks);
        x.marks = nullptr;
    }
    cudaEvent_t events[] = {x.ready, x.full[0], x.full[1], x.freed[0], x.freed[1], x.folded, x.acc_arrived, x.done};
    for (cudaEvent_t e : events)
        if (e)
            cudaEventDestroy(e);
    if (x.compute)
        cudaStreamDestroy(x.compute);
    if (x.link)
        cudaStreamDestroy(x.link);
    cudaFree(x.hbm);
    x.compute = x.link = nullptr;
    x.hbm = nullptr;
    return rc != FL_OK ? rc : status;
}

// Adds the ranks' HBM counts to the run's counter (on the current device), where the runner (or
// the launcher) reads them.
int add_to_run_counter(unsigned long long *hbm_dev, const unsigned long long total[2], FlError *err)
{
    if (!hbm_dev)
        return FL_OK;
    unsigned long long host[2];
    int rc = fl_cuda_status(cudaMemcpy(host, hbm_dev, sizeof host, cudaMemcpyDeviceToHost), "reading the HBM counter",
                            err);
    host[HBM_READ] += total[HBM_READ], host[HBM_WRITTEN] += total[HBM_WRITTEN];
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaMemcpy(hbm_dev, host, sizeof host, cudaMemcpyHostToDevice), "adding to the HBM counter",
                            err);
    return rc;
}

int check_problem(const AttnProblem *p, const RunCtx *ctx, FlError *err)
{
    if (p->d <= 0 || p->dv <= 0 || p->d > 128 || p->dv > 128)
        return fl_fail(err, FL_BAD_INPUT, "ring kernels: head dims d = %d, dv = %d; they support 1..128", p->d, p->dv);
    if (p->Hkv <= 0 || p->Hq % p->Hkv != 0)
        return fl_fail(err, FL_BAD_INPUT, "ring kernels: Hq = %d is not a multiple of Hkv = %d", p->Hq, p->Hkv);
    if (ranks_of(ctx) > kMaxRanks)
        return fl_fail(err, FL_BAD_INPUT, "ring: %d ranks; at most %d", ranks_of(ctx), kMaxRanks);
    return FL_OK;
}

// ==== launch mode B: this process is one rank, the problem is already its share ====================

int run_one_rank(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, Direction dir, FlError *err)
{
    const Ring g = ring_of(p, ranks_of(ctx));
    ncclComm_t comm = (ncclComm_t)ctx->comm;
    int count = 0, rank = -1;
    int rc = nccl_status(ncclCommCount(comm, &count), "ncclCommCount", err);
    if (rc == FL_OK)
        rc = nccl_status(ncclCommUserRank(comm, &rank), "ncclCommUserRank", err);
    if (rc == FL_OK && (count != g.P || rank != ctx->rank))
        return fl_fail(err, FL_BAD_INPUT, "ring: the communicator is rank %d of %d, the run asks for rank %d of %d",
                       rank, count, ctx->rank, g.P);
    if (rc == FL_OK && !ctx->workspace && ring_workspace_bytes(p, ctx, dir) > 0)
        return fl_fail(err, FL_BAD_INPUT, "ring: rank %d has no workspace", ctx->rank);
    if (rc != FL_OK)
        return rc;
    Rank x;
    memset(&x, 0, sizeof x);
    x.r = ctx->rank, x.comm = comm;
    rc = fl_cuda_status(cudaGetDevice(&x.device), "cudaGetDevice", err);
    x.rows = rank_rows(p->Tq, p->Tk, g.P, x.r);
    x.q = p->q, x.k = p->k, x.v = p->v, x.dO = p->dout;
    x.o = t->o, x.lse = t->lse, x.dq = t->dq, x.dk = t->dk, x.dv = t->dv;
    ring_buffers(g, dir, (float *)ctx->workspace, &x.buf);
    // The launcher's uploads and poisoning are on the legacy default stream: they come first.
    cudaEvent_t start = nullptr;
    if (rc == FL_OK)
        rc = caller_work_done(&start, err);
    if (rc == FL_OK)
        rc = rank_open(g, x, ctx->hbm_dev != nullptr, ctx->rank_counters != nullptr, err);
    if (rc == FL_OK)
        rc = wait(x.compute, start, err);
    if (rc == FL_OK)
        rc = ring_pass(g, &x, 1, dir, err);
    unsigned long long total[2] = {0, 0};
    rc = rank_close(g, x, ctx->rank_counters ? &ctx->rank_counters[x.r] : nullptr, total, rc, err);
    if (start)
        cudaEventDestroy(start);
    if (rc == FL_OK)
        rc = add_to_run_counter(ctx->hbm_dev, total, err);
    return rc;
}

// ==== launch mode A: this process drives every rank, one GPU each =================================
//
// The communicators (ncclCommInitAll over GPUs home, home + 1, ...; none for P = 1, which never
// sends) and each rank's device memory
// (its share of the problem; for ranks 1.. also its ring buffers, rank 0's being the runner's
// workspace) are made on first use and kept for the process, like cuda_blas.h's handle: making
// them takes far longer than a run. A run with another P makes new ones.

struct Cluster {
    int P, home;
    int device[kMaxRanks];
    ncclComm_t comm[kMaxRanks];
    void *mem[kMaxRanks];
    size_t bytes[kMaxRanks];
};
Cluster cluster; // zero: nothing made yet

void cluster_release()
{
    for (int r = 0; r < cluster.P; r++) {
        if (cluster.comm[r])
            ncclCommDestroy(cluster.comm[r]);
        if (cluster.mem[r]) {
            cudaSetDevice(cluster.device[r]);
            cudaFree(cluster.mem[r]);
        }
    }
    memset(&cluster, 0, sizeof cluster);
}

int cluster_open(int P, int home, int devices, FlError *err)
{
    if (cluster.P == P && cluster.home == home)
        return FL_OK;
    cluster_release();
    for (int r = 0; r < P; r++)
        cluster.device[r] = (home + r) % devices;
    // One rank never sends: it gets no communicator, so that P = 1 runs (and compute-sanitizer
    // checks it) without NCCL. Launch mode B makes one for P = 1 too.
    int rc = P == 1 ? FL_OK : nccl_status(ncclCommInitAll(cluster.comm, P, cluster.device), "ncclCommInitAll", err);
    if (rc == FL_OK)
        cluster.P = P, cluster.home = home;
    else
        memset(&cluster, 0, sizeof cluster);
    const int back = fl_cuda_status(cudaSetDevice(home), "cudaSetDevice", rc == FL_OK ? err : nullptr);
    return rc == FL_OK ? back : rc;
}

// Rank r's device memory of at least `bytes`, grown when a run needs more (current device: r's).
int cluster_memory(int r, size_t bytes, void **mem, FlError *err)
{
    if (cluster.bytes[r] < bytes) {
        cudaFree(cluster.mem[r]);
        cluster.mem[r] = nullptr, cluster.bytes[r] = 0;
        int rc = fl_cuda_alloc_bytes(&cluster.mem[r], bytes, "a rank's share of the problem", err);
        if (rc != FL_OK)
            return rc;
        cluster.bytes[r] = bytes;
    }
    *mem = cluster.mem[r];
    return FL_OK;
}

// Carves rank x's share (q, o, lse, dO, dq; k, v, dk, dv) and, for x.r > 0, its ring buffers out of
// its memory; rank 0's ring buffers are the runner's workspace (on rank 0's GPU, `home`).
int place_rank(const Ring &g, Rank &x, Direction dir, void *workspace, FlError *err)
{
    const AttnProblem *p = g.p;
    const size_t Q = rows_of(x.rows.q) * g.GQ, K = rows_of(x.rows.k) * g.G, d = (size_t)p->d, dv = (size_t)p->dv;
    const size_t sizes[] = {Q * d, Q * dv, Q, Q * dv, Q * d, K * d, K * dv, K * d, K * dv};
    size_t floats = 0;
    for (size_t n : sizes)
        floats += round_floats(n);
    const size_t ring = x.r == 0 ? 0 : ring_buffers(g, DIR_BWD, nullptr, nullptr);
    void *mem = nullptr;
    int rc = cluster_memory(x.r, (floats + ring) * sizeof(float), &mem, err);
    if (rc != FL_OK)
        return rc;
    float *at = (float *)mem;
    float *part[9];
    for (int i = 0; i < 9; i++) {
        part[i] = at;
        at += round_floats(sizes[i]);
    }
    x.q = part[0], x.o = part[1], x.lse = part[2], x.dO = part[3], x.dq = part[4];
    x.k = part[5], x.v = part[6], x.dk = part[7], x.dv = part[8];
    ring_buffers(g, dir, x.r == 0 ? (float *)workspace : at, &x.buf);
    return FL_OK;
}

// `height` rows of `width` bytes from src (pitch spitch, on device sdev) to dst (pitch dpitch, on
// ddev), on a stream of ddev.
int copy_rows(void *dst, int ddev, size_t dpitch, const void *src, int sdev, size_t spitch, size_t width, size_t height,
              cudaStream_t stream, FlError *err)
{
    if (width == 0 || height == 0)
        return FL_OK;
    if (ddev == sdev)
        return fl_cuda_status(
            cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice, stream),
            "copying a rank's share", err);
    cudaMemcpy3DPeerParms c;
    memset(&c, 0, sizeof c);
    c.srcPtr = make_cudaPitchedPtr(const_cast<void *>(src), spitch, width, height);
    c.srcDevice = sdev;
    c.dstPtr = make_cudaPitchedPtr(dst, dpitch, width, height);
    c.dstDevice = ddev;
    c.extent = make_cudaExtent(width, height, 1);
    return fl_cuda_status(cudaMemcpy3DPeerAsync(&c, stream), "copying a rank's share between GPUs", err);
}

// Hands rank x its part of a whole tensor on `home` ((heads, rows, width), the rows cut by `chunks`)
// when `out` is false; puts it back into the whole tensor when `out` is true.
int move_share(const Rank &x, int home, const Rows chunks[2], size_t heads, size_t rows, size_t width,
               const float *whole, float *share, bool out, FlError *err)
{
    int rc = FL_OK;
    for (int w = 0; rc == FL_OK && w < 2 && whole && share; w++) {
        const size_t n = chunks[w].hi - chunks[w].lo, f = sizeof(float);
        float *part = share + share_offset(chunks, w, heads, width);
        const float *in_whole = whole + chunks[w].lo * width;
        rc = out ? copy_rows(const_cast<float *>(in_whole), home, rows * width * f, part, x.device, n * width * f,
                             n * width * f, heads, x.compute, err)
                 : copy_rows(part, x.device, n * width * f, in_whole, home, rows * width * f, n * width * f, heads,
                             x.compute, err);
    }
    return rc;
}

int scatter(const Ring &g, const Rank &x, int home, const AttnProblem *p, const AttnTensors *t, Direction dir,
            FlError *err)
{
    const size_t Tq = (size_t)p->Tq, Tk = (size_t)p->Tk, d = (size_t)p->d, dv = (size_t)p->dv;
    int rc = move_share(x, home, x.rows.q, g.GQ, Tq, d, p->q, const_cast<float *>(x.q), false, err);
    if (rc == FL_OK)
        rc = move_share(x, home, x.rows.k, g.G, Tk, d, p->k, const_cast<float *>(x.k), false, err);
    if (rc == FL_OK)
        rc = move_share(x, home, x.rows.k, g.G, Tk, dv, p->v, const_cast<float *>(x.v), false, err);
    if (dir == DIR_BWD) {
        if (rc == FL_OK)
            rc = move_share(x, home, x.rows.q, g.GQ, Tq, dv, t->o, x.o, false, err);
        if (rc == FL_OK)
            rc = move_share(x, home, x.rows.q, g.GQ, Tq, 1, t->lse, x.lse, false, err);
        if (rc == FL_OK)
            rc = move_share(x, home, x.rows.q, g.GQ, Tq, dv, p->dout, const_cast<float *>(x.dO), false, err);
    }
    return rc;
}

int gather(const Ring &g, const Rank &x, int home, const AttnProblem *p, AttnTensors *t, Direction dir, FlError *err)
{
    const size_t Tq = (size_t)p->Tq, Tk = (size_t)p->Tk, d = (size_t)p->d, dv = (size_t)p->dv;
    if (dir == DIR_FWD) {
        int rc = move_share(x, home, x.rows.q, g.GQ, Tq, dv, t->o, x.o, true, err);
        return rc == FL_OK ? move_share(x, home, x.rows.q, g.GQ, Tq, 1, t->lse, x.lse, true, err) : rc;
    }
    int rc = move_share(x, home, x.rows.q, g.GQ, Tq, d, t->dq, x.dq, true, err);
    if (rc == FL_OK)
        rc = move_share(x, home, x.rows.k, g.G, Tk, d, t->dk, x.dk, true, err);
    if (rc == FL_OK)
        rc = move_share(x, home, x.rows.k, g.G, Tk, dv, t->dv, x.dv, true, err);
    return rc;
}

int run_all_ranks(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, Direction dir, FlError *err)
{
    const Ring g = ring_of(p, ranks_of(ctx));
    int devices = 0, home = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess)
        devices = 0;
    if (g.P > devices)
        return fl_fail(err, FL_NO_DEVICE,
                       "stage 13 (ring, cuda): --ranks %d puts each rank on its own GPU, and this machine shows %d",
                       g.P, devices);
    int rc = fl_cuda_status(cudaGetDevice(&home), "cudaGetDevice", err);
    if (rc == FL_OK)
        rc = cluster_open(g.P, home, devices, err);
    if (rc != FL_OK)
        return rc;
    // Whatever the caller queued on the legacy default stream (uploads, poisoning) comes first.
    cudaEvent_t start = nullptr;
    rc = caller_work_done(&start, err);
    Rank ranks[kMaxRanks];
    memset(ranks, 0, sizeof ranks);
    int opened = 0;
    for (; rc == FL_OK && opened < g.P; opened++) {
        Rank &x = ranks[opened];
        x.r = opened, x.device = (home + opened) % devices, x.comm = cluster.comm[opened];
        x.rows = rank_rows(p->Tq, p->Tk, g.P, x.r);
        rc = rank_open(g, x, ctx->hbm_dev != nullptr, ctx->rank_counters != nullptr, err);
        if (rc == FL_OK)
            rc = place_rank(g, x, dir, ctx->workspace, err);
        if (rc == FL_OK)
            rc = wait(x.compute, start, err);
        if (rc == FL_OK)
            rc = scatter(g, x, home, p, t, dir, err);
    }
    if (rc == FL_OK)
        rc = ring_pass(g, ranks, g.P, dir, err);
    for (int r = 0; rc == FL_OK && r < g.P; r++) {
        rc = use_device(ranks[r], err);
        if (rc == FL_OK)
            rc = gather(g, ranks[r], home, p, t, dir, err);
    }
    unsigned long long total[2] = {0, 0};
    for (int r = 0; r < opened; r++)
        rc = rank_close(g, ranks[r], ctx->rank_counters ? &ctx->rank_counters[r] : nullptr, total, rc, err);
    cudaSetDevice(home);
    if (start)
        cudaEventDestroy(start);
    if (rc == FL_OK)
        rc = add_to_run_counter(ctx->hbm_dev, total, err);
    return rc;
}

// ==== the stage ====================================================================================

int ring_run(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, Direction dir, FlError *err)
{
    int rc = check_problem(p, ctx, err);
    if (rc != FL_OK)
        return rc;
    return ctx->comm ? run_one_rank(p, t, ctx, dir, err) : run_all_ranks(p, t, ctx, dir, err);
}

int ring_forward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    return ring_run(p, t, ctx, DIR_FWD, err);
}

int ring_backward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    return ring_run(p, t, ctx, DIR_BWD, err);
}

const StageImpl ring_cuda = {
    "13",
    "ring",
    "",
    DEVICE_CUDA,
    "ring attention on GPUs: the K/V shards travel over NCCL while each step computes; (O, lse) merged per step",
    FEAT_BACKWARD | FEAT_CAUSAL | FEAT_GQA,
    ring_forward,
    ring_backward,
    ring_workspace_bytes, /* one rank's ring buffers: two K/V shards, and D, dK/dV x 3 backward */
    nullptr,
    PRECISION_F32,
    {0, 0},
    1, /* own_streams: a compute and a link stream per rank */
};

} // namespace

extern "C" const StageImpl *const stage13_ring_cuda[] = {&ring_cuda, NULL};
