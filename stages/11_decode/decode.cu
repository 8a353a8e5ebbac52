/* stages/11_decode/decode.cu — decoding: split-KV attention over a paged KV cache, CUDA, float32.
 *
 * New in stage 11 (decode.c says the same for the CPU): at decode time a (sequence, kv head) has
 * only group * Tq query rows, so stage 10's grid, one block per query tile, has B * Hkv blocks:
 * 8 blocks for one sequence of a GQA model, on a GPU of 132 SMs. Two kernels fix that:
 *
 *   split_kernel    grid (splits, query blocks, B * Hkv). Block (s, i, g) takes chunk s of the keys
 *                   query block i of kv head g sees (paged.h: key_span, split_chunk) and runs
 *                   FA2's inner loop over it: K/V tiles gathered through the block table, masked key
 *                   by key, online softmax in base 2. It ends with the chunk's partial result
 *                   O_s = Õ / l and lse_s = m + log l, into the workspace (or straight into o and
 *                   lse when there is one split).
 *   combine_kernel  one warp per output row: lse = log sum_s exp(lse_s), O = sum_s exp(lse_s - lse) O_s.
 *
 * The split count (paged.h: split_count) fills the GPU's resident blocks (SMs * blocks per SM,
 * from the occupancy API) in rounds as full as possible, with the fewest splits within 85% of the
 * best fill and every split at least 512 keys; --splits overrides it.
 *
 * Threads and tiles (DecodeTile): 128 threads = 4 warps, BR = 16 query rows, BC = 32 keys a tile.
 *   scores  warp w owns rows w + 4i (i < 4); lane l owns key l of the tile, so a row's 32 scores
 *           sit in one warp and its max and sum are warp shuffles. Rows past the block's are skipped
 *           per warp, so a decode block of 4 rows keeps every warp busy with one row each.
 *   P V     the same warp and rows; lane l owns output columns l + 32q (q < D/32); P_ij comes from
 *           lane j by a shuffle, V_j row j is read once per warp for its rows.
 * Shared memory (floats): Qs (BR, D+4), and two stages of Ks (BC, D+4) and Vs (BC, D): the next
 * tile's cp.async copies run while this one is computed. Where a tile's rows are (paged.h:
 * kv_offset, through the block table) is worked out two tiles ahead, one lane of warp 0 per key,
 * into a ring of three row-index arrays, so each 16-byte copy only reads its row's index. The +4 pad puts the 8 rows a quarter warp
 * reads as float4 on distinct banks. Head dims are zero-padded to D = 32, 64, 96 or 128. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "attn.h"
#include "cuda_tiles.cuh"
#include "cuda_util.h"
#include "error.h"
#include "mask.h"
#include "paged.h"

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kMinKeysPerSplit = 512;

struct DecodeArgs {
    AttnProblem p;          // device pointers; paged or contiguous K/V (paged.h)
    float *out_o, *out_lse; // o and lse, or the partials (splits, B*Hq*Tq, dv) and (splits, B*Hq*Tq)
    int splits, R;          // R = group * Tq packed rows per kv head
    float scale_log2;       // scale * log2(e): scores live in base 2
    bool vec_q, vec_k, vec_v;
    unsigned long long *hbm; // [read, written] or NULL
};

template <int D_> struct DecodeTile {
    static constexpr int D = D_, BR = 16, BC = 32, NT = 128, NW = NT / 32;
    static constexpr int RPW = BR / NW; // rows per warp
    static constexpr int CPL = D / 32;  // output columns per lane
    static constexpr int QS = D + 4, KS = D + 4, VS = D;
    static constexpr int STAGE_FLOATS = BC * KS + BC * VS;
    static constexpr size_t SMEM_BYTES = (size_t)(BR * QS + 2 * STAGE_FLOATS) * sizeof(float);
    static_assert(BC == 32, "one key per lane");
};

// Where a tile's keys are: the row index of key number k of the span (numbered across its runs),
// kv_offset in rows, so the key starts at k + index * d and its value at v + index * dv; -1 for a
// number at or past `end` (a short last tile). One lane per key: the block table is read once per
// key row here, not once per 16-byte copy.
__device__ long long key_row_index(const AttnProblem &p, int b, int kvh, KeySpan span, int k, int end)
{
    return k < end ? (long long)kv_offset(&p, b, kvh, span_key(span, k), 1) : -1;
}

// Issues the cp.async copies of one tile into a stage's Ks and Vs: row r from the row index
// rows[r] (key_row_index, computed ahead into shared memory); missing rows become zeros.
template <class T>
__device__ void load_keys(float *Ks, float *Vs, const DecodeArgs &a, const long long *rows, int tid)
{
    const AttnProblem &p = a.p;
    load_rows<T::BC, T::D, T::KS, T::NT>(
        Ks, [&](int r) { return rows[r] >= 0 ? p.k + rows[r] * p.d : nullptr; }, p.k, p.d, a.vec_k, tid);
    load_rows<T::BC, T::D, T::VS, T::NT>(
        Vs, [&](int r) { return rows[r] >= 0 ? p.v + rows[r] * p.dv : nullptr; }, p.v, p.dv, a.vec_v, tid);
}

// Bytes one tile reads: its K and V rows, and for a paged cache the block-table entry of every
// page its keys lie in (consecutive keys of one page share the entry). Called by one thread.
__device__ unsigned long long tile_bytes(const AttnProblem &p, int b, KeySpan span, int k0, int n)
{
    unsigned long long bytes = (unsigned long long)n * (p.d + p.dv) * sizeof(float);
    for (int j = 0, last = -1; p.page_size > 0 && j < n; j++) {
        const int page = page_of(&p, b, span_key(span, k0 + j));
        bytes += page != last ? sizeof(int32_t) : 0;
        last = page;
    }
    return bytes;
}

template <class T>
__global__ void __launch_bounds__(T::NT) split_kernel(DecodeArgs a)
{
    constexpr int D = T::D, BR = T::BR, BC = T::BC, NW = T::NW, RPW = T::RPW, CPL = T::CPL;
    extern __shared__ float4 smem4[];
    float *Qs = reinterpret_cast<float *>(smem4); // Q_i  (BR, D)
    float *stages = Qs + BR * T::QS;              // two stages of K_j (BC, D), V_j (BC, D)
    __shared__ long long ring[3][BC];             // row indices of tiles t, t + 1, t + 2

    const AttnProblem &p = a.p;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int split = blockIdx.x, i0 = blockIdx.y * BR, g = blockIdx.z;
    const int b = g / p.Hkv, kvh = g % p.Hkv, group = p.Hq / p.Hkv;
    const int rows = min(BR, a.R - i0);
    const Causal causal = causal_make(p.causal, p.Tq, seq_keys(&p, b), p.window, p.sink_tokens);
    const KeySpan span = key_span(tile_runs(causal, i0, rows));
    const Chunk chunk = split_chunk(span_count(span), a.splits, split);
    const int n_tiles = (chunk.end - chunk.first + BC - 1) / BC;

    // Prologue: the row indices of tiles 0 and 1 (warp 0, a lane per key), then Q_i and tile 0 in
    // flight. From then on tile t + 2's indices are read from the block table during tile t.
    if (warp == 0)
        for (int t = 0; t < 2; t++)
            ring[t][lane] = key_row_index(p, b, kvh, span, chunk.first + t * BC + lane, chunk.end);
    __syncthreads();
    load_tile<BR, D, T::QS, T::NT>(Qs, p.q + ((size_t)g * a.R + i0) * p.d, rows, p.d, a.vec_q, tid);
    if (n_tiles > 0)
        load_keys<T>(stages, stages + BC * T::KS, a, ring[0], tid);
    cp_async_commit();
    if (tid == 0)
        hbm_dev_add(a.hbm, HBM_READ, (unsigned long long)rows * p.d * sizeof(float) +
                                         (p.page_size > 0 ? sizeof(int32_t) : 0)); // Q_i, seq_lens[b]

    // This warp's rows r = warp + NW i: their key runs, m, l (base 2) and Õ. Split 0 starts from
    // the learned sink logit (m = s_h log2 e, l = 1), the others from nothing.
    float m[RPW], l[RPW], o[RPW][CPL];
    KeyRuns runs[RPW];
#pragma unroll
    for (int i = 0; i < RPW; i++) {
        const int r = warp + NW * i;
        runs[i] = row_runs(causal, i0 + r);
        const bool sink = p.sinks && split == 0 && r < rows;
        m[i] = sink ? p.sinks[kvh * group + (i0 + r) / p.Tq] * kLog2e : -INFINITY;
        l[i] = sink ? 1.0f : 0.0f;
#pragma unroll
        for (int q = 0; q < CPL; q++)
            o[i][q] = 0.0f;
    }

    for (int t = 0; t < n_tiles; t++) {
        const int k0 = chunk.first + t * BC, n = min(BC, chunk.end - k0);
        cp_async_wait<0>(); // tile t (and, the first time, Q_i) has landed ...
        __syncthreads();    // ... for every thread, and every warp is done with tile t - 1
        const float *Ks = stages + (t & 1) * T::STAGE_FLOATS, *Vs = Ks + BC * T::KS;
        if (t + 1 < n_tiles) { // tile t + 1 streams into the other stage while this one is computed
            float *Kn = stages + ((t + 1) & 1) * T::STAGE_FLOATS;
            load_keys<T>(Kn, Kn + BC * T::KS, a, ring[(t + 1) % 3], tid);
        }
        cp_async_commit();
        // Tile t + 2's row indices: read now, stored after this tile's math (the read's latency
        // hides behind it); the next iteration's barrier publishes them.
        const long long ahead = warp == 0 ? key_row_index(p, b, kvh, span, k0 + 2 * BC + lane, chunk.end) : -1;
        if (tid == 0 && a.hbm)
            hbm_dev_add(a.hbm, HBM_READ, tile_bytes(p, b, span, k0, n));

        // S = Q_i K_j^T * scale log2 e: lane owns key k0 + lane of the warp's rows
        const int key = lane < n ? span_key(span, k0 + lane) : -1;
        float s[RPW];
#pragma unroll
        for (int i = 0; i < RPW; i++)
            s[i] = 0.0f;
#pragma unroll 8
        for (int c = 0; c < D; c += 4) {
            const float4 k4 = *reinterpret_cast<const float4 *>(Ks + lane * T::KS + c);
#pragma unroll
            for (int i = 0; i < RPW; i++) {
                if (warp + NW * i >= rows)
                    continue; // warp-uniform: this warp has no row i here
                const float4 q4 = *reinterpret_cast<const float4 *>(Qs + (warp + NW * i) * T::QS + c);
                s[i] += q4.x * k4.x + q4.y * k4.y + q4.z * k4.z + q4.w * k4.w;
            }
        }

        // Online softmax per row (a warp's 32 lanes hold the row's 32 keys), then Õ += P V_j
#pragma unroll
        for (int i = 0; i < RPW; i++) {
            if (warp + NW * i >= rows)
                continue;
            const float x = key >= 0 && sees(runs[i], key) ? s[i] * a.scale_log2 : -INFINITY;
            const float m_new = fmaxf(m[i], row_max<32>(x));
            const float m_ref = m_new == -INFINITY ? 0.0f : m_new; // no key seen yet: stay at 0
            const float pij = exp2f(x - m_ref), alpha = exp2f(m[i] - m_ref);
            l[i] = l[i] * alpha + row_sum<32>(pij);
            m[i] = m_new;
#pragma unroll
            for (int q = 0; q < CPL; q++)
                o[i][q] *= alpha;
            s[i] = pij;
        }
#pragma unroll 4
        for (int j = 0; j < BC; j++) {
            float v[CPL];
#pragma unroll
            for (int q = 0; q < CPL; q++)
                v[q] = Vs[j * T::VS + lane + 32 * q];
#pragma unroll
            for (int i = 0; i < RPW; i++) {
                if (warp + NW * i >= rows)
                    continue; // warp-uniform, as above
                const float pj = __shfl_sync(0xffffffffu, s[i], j);
#pragma unroll
                for (int q = 0; q < CPL; q++)
                    o[i][q] += pj * v[q];
            }
        }
        if (warp == 0)
            ring[(t + 2) % 3][lane] = ahead;
    }

    // The chunk's result: O_s = Õ / l, lse_s = (m + log2 l) ln 2; a chunk that saw no key gives
    // O_s = 0 and lse_s = -inf (no weight in the combine)
    const size_t rows_total = output_rows(&p);
#pragma unroll
    for (int i = 0; i < RPW; i++) {
        const int r = warp + NW * i;
        if (r >= rows)
            continue;
        const size_t row = (size_t)split * rows_total + (size_t)g * a.R + i0 + r; // packed = o's order
        /* exercise: begin — the chunk's partial O_s and lse_s of row r (see above) (check 11 --device cuda --splits 3: o and lse) | stub: (void)row; */
        const float inv_l = l[i] != 0.0f ? 1.0f / l[i] : 0.0f; // l = NaN is a NaN, not an empty chunk
#pragma unroll
        for (int q = 0; q < CPL; q++)
            if (lane + 32 * q < p.dv)
                a.out_o[row * p.dv + lane + 32 * q] = o[i][q] * inv_l;
        if (lane == 0)
            a.out_lse[row] = l[i] != 0.0f ? (m[i] + log2f(l[i])) * kLn2 : -INFINITY;
        /* exercise: end */
    }
    if (tid == 0)
        hbm_dev_add(a.hbm, HBM_WRITTEN, (unsigned long long)rows * (p.dv + 1) * sizeof(float));
}

// One warp per output row: the splits' lse_s and O_s merged; 8 rows per 256-thread block.
__global__ void combine_kernel(const float *part_o, const float *part_lse, float *o, float *lse,
                               long rows, int dv, int splits, unsigned long long *hbm)
{
    const long row = (long)blockIdx.x * 8 + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (threadIdx.x == 0) {
        const long n = min(8L, rows - (long)blockIdx.x * 8);
        hbm_dev_add(hbm, HBM_READ, (unsigned long long)n * splits * (dv + 1) * sizeof(float));
        hbm_dev_add(hbm, HBM_WRITTEN, (unsigned long long)n * (dv + 1) * sizeof(float));
    }
    if (row >= rows)
        return;
    /* exercise: begin — the lse merge of the row over the splits, one warp (check 11 --device cuda --splits 3: o and lse) */
    float m = -INFINITY;
    for (int s = lane; s < splits; s += 32)
        m = fmaxf(m, part_lse[(size_t)s * rows + row]);
    m = row_max<32>(m);
    const float shift = m == -INFINITY ? 0.0f : m; // every split empty: the terms are 0 (a NaN stays NaN)
    float sum = 0.0f;
    for (int s = lane; s < splits; s += 32)
        sum += expf(part_lse[(size_t)s * rows + row] - shift);
    sum = row_sum<32>(sum);
    const float total = sum != 0.0f ? shift + logf(sum) : -INFINITY;
    for (int c = lane; c < dv; c += 32) {
        float acc = 0.0f;
        for (int s = 0; s < splits && total != -INFINITY; s++)
            acc += expf(part_lse[(size_t)s * rows + row] - total) * part_o[((size_t)s * rows + row) * dv + c];
        o[(size_t)row * dv + c] = acc;
    }
    if (lane == 0)
        lse[row] = total;
    /* exercise: end */
}

// SMs * resident blocks per SM, the units a split plan fills; the first call also raises the
// kernel's shared-memory limit, so every launch path calls it first.
template <class T> int resident_units(int *units, FlError *err)
{
    static int cached = 0;
    if (cached == 0) {
        int device = 0, sms = 0, per_sm = 0;
        int rc = fl_cuda_status(cudaFuncSetAttribute(split_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     (int)T::SMEM_BYTES),
                                "decode: raising the shared-memory limit", err);
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaGetDevice(&device), "decode: cudaGetDevice", err);
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                                "decode: reading the SM count", err);
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, split_kernel<T>, T::NT,
                                                                              T::SMEM_BYTES),
                                "decode: occupancy of split_kernel", err);
        if (rc != FL_OK)
            return rc;
        cached = sms * (per_sm > 0 ? per_sm : 1);
    }
    *units = cached;
    return FL_OK;
}

} // namespace

static int padded_dim(const AttnProblem *p)
{
    const int x = p->d > p->dv ? p->d : p->dv;
    return (x + 31) / 32 * 32;
}

// The split count: ctx->splits, or one that fills the GPU once (paged.h: split_count).
template <class T> static int plan_splits(const AttnProblem *p, const RunCtx *ctx, int *splits, FlError *err)
{
    int units = 0;
    int rc = resident_units<T>(&units, err);
    *splits = ctx->splits > 0 ? ctx->splits
                              : split_count(query_blocks(p, T::BR), units, longest_span(p), kMinKeysPerSplit);
    return rc;
}

template <int D> using Config = DecodeTile<D>;

static int splits_for(const AttnProblem *p, const RunCtx *ctx, int *splits, FlError *err)
{
    switch (padded_dim(p)) {
    case 32: return plan_splits<Config<32>>(p, ctx, splits, err);
    case 64: return plan_splits<Config<64>>(p, ctx, splits, err);
    case 96: return plan_splits<Config<96>>(p, ctx, splits, err);
    default: return plan_splits<Config<128>>(p, ctx, splits, err);
    }
}

// The partials (splits, B*Hq*Tq, dv + 1 floats), when there is more than one split.
static size_t decode_workspace_bytes(const AttnProblem *p, const RunCtx *ctx, Direction dir)
{
    (void)dir;
    int splits = 1;
    FlError err = {{0}};
    if (p->d > 128 || p->dv > 128 || splits_for(p, ctx, &splits, &err) != FL_OK)
        return 0; // the forward pass reports the error
    return partials_bytes(p, splits);
}

template <class T> static int decode_launch(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    int splits = 1;
    int rc = plan_splits<T>(p, ctx, &splits, err); // also raises the shared-memory limit
    if (rc != FL_OK)
        return rc;
    DecodeArgs a;
    a.p = *p;
    a.splits = splits, a.R = packed_rows(p);
    a.scale_log2 = p->scale * kLog2e;
    a.out_o = splits > 1 ? (float *)ctx->workspace : t->o;
    a.out_lse = splits > 1 ? a.out_o + (size_t)splits * output_rows(p) * p->dv : t->lse;
    const auto aligned = [](const void *x) { return ((uintptr_t)x & 15u) == 0; };
    a.vec_q = p->d % 4 == 0 && aligned(p->q);
    a.vec_k = p->d % 4 == 0 && aligned(p->k);
    a.vec_v = p->dv % 4 == 0 && aligned(p->v);
    a.hbm = ctx->hbm_dev;
    const dim3 grid((unsigned)splits, (unsigned)ceil_div(a.R, T::BR), (unsigned)(p->B * p->Hkv));
    split_kernel<T><<<grid, T::NT, T::SMEM_BYTES>>>(a);
    rc = fl_cuda_launch_status("split_kernel", err);
    if (rc != FL_OK || splits == 1)
        return rc;
    const long rows = (long)output_rows(p);
    combine_kernel<<<(unsigned)((rows + 7) / 8), 256>>>(a.out_o, a.out_lse, t->o, t->lse, rows, p->dv, splits,
                                                       a.hbm);
    return fl_cuda_launch_status("combine_kernel", err);
}

static int decode_forward_cuda(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    if (p->d <= 0 || p->dv <= 0 || p->d > 128 || p->dv > 128)
        return fl_fail(err, FL_BAD_INPUT, "decode kernel: head dims d = %d, dv = %d; this kernel supports 1..128",
                       p->d, p->dv);
    if (p->Tq <= 0 || p->B <= 0 || p->Hq <= 0)
        return FL_OK; // nothing to compute
    switch (padded_dim(p)) {
    case 32: return decode_launch<Config<32>>(p, t, ctx, err);
    case 64: return decode_launch<Config<64>>(p, t, ctx, err);
    case 96: return decode_launch<Config<96>>(p, t, ctx, err);
    default: return decode_launch<Config<128>>(p, t, ctx, err);
    }
}

static const StageImpl decode = {
    .stage = "11",
    .name = "decode",
    .variant = "",
    .device = DEVICE_CUDA,
    .lesson = "split-KV over a paged KV cache: key chunks in parallel, merged by their lse",
    .features = FEAT_CAUSAL | FEAT_GQA | FEAT_WINDOW | FEAT_SINK_TOKENS | FEAT_SINKS | FEAT_PAGED,
    .forward = decode_forward_cuda,
    .backward = NULL,
    .workspace_bytes = decode_workspace_bytes,
};

extern "C" const StageImpl *const stage11_decode_cuda[] = {&decode, NULL};
