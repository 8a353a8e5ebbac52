/* stages/16_tc_decode/tc_decode.cu — decoding on the tensor cores: stage 11's split-KV attention over
 * a paged KV cache, with bf16 inputs, mma.sync and float32 accumulation (sm_80+). Its parent is
 * stage 11's decode.cu (`flashlab diff 11 16`); reference.c is its CPU reference and says the same
 * arithmetic step by step.
 *
 * New in stage 16 (tiles.h):
 *   split_kernel    grid (splits, query blocks, B * Hkv), as stage 11. Block (s, i, g) takes chunk s
 *                   of the keys query block i of kv head g sees; the block's packed rows (the
 *                   group's query heads times Tq, BR = 16 or 32 of them) are the M of mma.sync
 *                   m16n8k16 tiles. Its four warps take turns at the chunk's 16-key tiles: warp w
 *                   walks tiles w, w + 4, ..., each streaming its own tiles into its own ring of
 *                   ST = 2 shared-memory stages with cp.async (the row addresses from the block
 *                   table, one lane per key, looked up a tile ahead), with its own running max,
 *                   sum and O in registers:
 *                     S = Q16 K16^T (BR, 16) by mma.sync, the mask key by key (only on a tile some
 *                     row does not wholly see: tile_whole), the online softmax in base 2, P rounded
 *                     to bf16 in registers, O += P V16 by mma.sync.
 *                   At the end of the chunk the warps' (m, l, O) meet in shared memory and merge by
 *                   their maxima (split 0 adds the learned sink logit there), giving the chunk's
 *                   O_s and lse_s: into the workspace, or into o and lse with one split.
 *   combine_kernel  stage 11's merge, lse = log sum_s exp(lse_s), O = sum_s exp(lse_s - lse) O_s, with a
 *                   block of threads per row instead of a warp (and o = 0 for a row that sees no
 *                   key, as in reference.c, even under a NaN sink logit), launched on Hopper so
 *                   that it starts while the split kernel ends (programmatic dependent launch), its
 *                   first loads of O_s issued before the weights are known.
 *   gpu_split_count the split count: every SM the same number of blocks in one wave.
 * A decode step reads each key once and does two multiply-adds per byte of it, so the kernel is
 * about keeping loads in flight while the SM's schedulers always have a warp to run. Tiles of 16
 * keys (8 KiB at d = 128) make a block's ring 64 KiB, so three blocks (12 warps) share an SM where
 * 32-key tiles left room for one (4 warps, a warp per scheduler): measured on an H200 at B = 8,
 * Tk = 32768, 2.9 TB/s with 32-key tiles, 4.1 TB/s with 16 (README, "Speed"). Each warp's walk is
 * a chain of dependent instructions, so the loop keeps few: a copy takes one shuffle and two
 * address computations, a whole tile no mask, and O is rescaled only when a row's max moved. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "attn.h"
#include "cuda_util.h"
#include "error.h"
#include "mask.h"
#include "mma.cuh"
#include "paged.h"
#include "tiles.h"

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct DecodeArgs {
    AttnProblem p;          // device pointers; paged or contiguous K/V (paged.h)
    const bf16 *q, *k, *v;  // the runner's bf16 copies of q and of the pools (or of k, v)
    float *out_o, *out_lse; // o and lse, or the partials (splits, B*Hq*Tq, dv) and (splits, B*Hq*Tq)
    int splits, R;          // R = group * Tq packed rows per kv head
    float scale_log2;       // scale * log2(e): scores live in base 2
    unsigned long long *hbm; // [read, written] or NULL
};

// D = d = dv (64 or 128); MT = 16-row MMA tiles of packed rows (1 or 2: tcd_block_rows); BC keys a
// tile, ST shared-memory stages per warp (tiles.h: TCD_BLOCK_C, TCD_STAGES).
template <int D_, int MT_> struct DecodeTile {
    static constexpr int D = D_, MT = MT_, BR = 16 * MT, BC = TCD_BLOCK_C, ST = TCD_STAGES, NW = TCD_WARPS;
    static constexpr int NT = 32 * NW;
    static constexpr int NB = BC / 8, KC = BC / 16;          // n-tiles of S, k-steps of P V per tile
    static constexpr int STAGE = 2 * BC * D;                 // bf16 elements of one stage: K16_t, V16_t
    static constexpr size_t Q_BYTES = (size_t)BR * D * sizeof(bf16);
    static constexpr size_t RING_BYTES = (size_t)NW * ST * STAGE * sizeof(bf16);
    // the merge, after the walk, from the ring's first byte: every warp's m, l (BR) and O (BR, D),
    // O's rows OS floats apart (padded by 8, so the lanes of a warp store to different banks)
    static constexpr int OS = D + 8;
    static constexpr size_t MERGE_BYTES = (size_t)NW * BR * (OS + 2) * sizeof(float);
    static constexpr size_t SMEM_BYTES = Q_BYTES + (RING_BYTES > MERGE_BYTES ? RING_BYTES : MERGE_BYTES);
    // blocks an SM can hold by shared memory (228 KiB, 1 KiB of it reserved per block), at most 4:
    // the register cap __launch_bounds__ asks for, so that no SM is left with unused shared memory
    static constexpr int SM_BLOCKS_ = (int)((228u * 1024u) / (SMEM_BYTES + 1024u));
    static constexpr int MIN_BLOCKS = MT == 2 ? 1 : SM_BLOCKS_ > 4 ? 4 : SM_BLOCKS_ < 1 ? 1 : SM_BLOCKS_;
    static_assert(BC == 16 || BC == 32, "one key per lane, whole k-steps of P V");
    static_assert(ST >= 2, "a tile computed while the next streams in");
};

// Where a tile's keys are: the row index of key number k of the span (numbered across its runs),
// kv_offset in rows, so the key starts at k + index * d and its value at v + index * dv; -1 for a
// number at or past `end` (a short last tile). One lane per key: the block table is read once per
// key row here, not once per 16-byte copy. An int holds any row a GPU can hold: a pool of 2^31
// rows of at least 128 bytes would be 256 GiB.
__device__ int key_row_index(const AttnProblem &p, int b, int kvh, KeySpan span, int k, int end)
{
    return k < end ? (int)kv_offset(&p, b, kvh, span_key(span, k), 1) : -1;
}

// One warp issues the cp.async copies of its tile into a stage: K16_t, V16_t (BC keys, D columns
// each, swizzled). Lane l copies 16-byte chunk l % CHUNKS of keys l / CHUNKS, + 32 / CHUNKS, ...,
// so its chunk (and its column) stays the same and only the key row changes, taken from the row
// index lane r holds by one shuffle; a missing row becomes zeros. A step reads each cache row once,
// so the copies mark its lines evict-first in L2 (the README's "Streaming the cache past L2").
template <class T>
__device__ void load_tile_kv(bf16 *stage, const DecodeArgs &a, int my_row, int lane)
{
    constexpr int D = T::D, CHUNKS = D / 8, KEYS_A_PASS = 32 / CHUNKS;
    bf16 *Ks = stage, *Vs = stage + T::BC * D;
    const int c = (lane % CHUNKS) * 8;
    const bf16 *kc = a.k + c, *vc = a.v + c; // this lane's column of row 0
    const unsigned long long once = l2_evict_first(); // read once a step
#pragma unroll
    for (int i = 0; i < T::BC / KEYS_A_PASS; i++) {
        const int r = lane / CHUNKS + KEYS_A_PASS * i;
        const int row = __shfl_sync(0xffffffffu, my_row, r);
        const size_t at = (size_t)max(row, 0) * D;
        cp_async16_policy(Ks + swizzle<D>(r, c), kc + at, row >= 0 ? 16 : 0, once);
        cp_async16_policy(Vs + swizzle<D>(r, c), vc + at, row >= 0 ? 16 : 0, once);
    }
}

// Bytes one tile reads: its K16 and V16 rows, and for a paged cache the block-table entry of every
// page its keys lie in (consecutive keys of one page share the entry). Called by one lane.
__device__ unsigned long long tile_bytes(const AttnProblem &p, int b, KeySpan span, int k0, int n)
{
    unsigned long long bytes = (unsigned long long)n * (p.d + p.dv) * sizeof(bf16);
    for (int j = 0, last = -1; p.page_size > 0 && j < n; j++) {
        const int page = page_of(&p, b, span_key(span, k0 + j));
        bytes += page != last ? sizeof(int32_t) : 0;
        last = page;
    }
    return bytes;
}

// One warp's state: for each of its MT row tiles and this lane's two rows (g and g + 8) the running
// max (base 2), the lane's share of the sum, and O (the mma C layout: column pairs 8n + 2 t4).
template <class T> struct WarpState {
    float m[T::MT][2], l[T::MT][2];
    float o[T::MT][T::D / 8][4];
};

// Whether every row of the block sees every key of the tile [k0, k0 + BC) of the span, so that
// the tile needs no mask (most tiles of a decode step). Each lane checks its own rows (g and g + 8
// of each row tile) and the warp agrees. A tile that runs past the chunk or crosses from the sink
// tokens into the band is masked: its keys are then not consecutive positions.
template <class T>
__device__ bool tile_whole(const KeyRuns (&runs)[T::MT][2], KeySpan span, int k0, int end)
{
    const int first = span_key(span, k0), last = span_key(span, k0 + T::BC - 1);
    bool whole = k0 + T::BC <= end && last - first == T::BC - 1;
#pragma unroll
    for (int mt = 0; mt < T::MT; mt++)
#pragma unroll
        for (int rr = 0; rr < 2; rr++) { // keys [first, last] inside [lo, hi), inside [0, se), or
            const KeyRuns k = runs[mt][rr]; // the two runs touch (se >= lo) and make [0, hi)
            whole = whole && last < k.hi && (first >= k.lo || last < k.se || k.se >= k.lo);
        }
    return __all_sync(0xffffffffu, whole);
}

// One tile of the warp: S = Q16 K16^T, the mask (MASKED: key by key; tile_whole said the tile
// needs none otherwise), the online softmax, O += bf16(P) V16.
template <class T, bool MASKED>
__device__ void tile_step_as(WarpState<T> &w, const bf16 *Qs, const bf16 *stage, const DecodeArgs &a,
                             const KeyRuns (&runs)[T::MT][2], KeySpan span, int k0, int end, int lane)
{
    constexpr int D = T::D, MT = T::MT;
    const bf16 *Ks = stage, *Vs = stage + T::BC * D;
    constexpr int NB = T::NB, KC = T::KC;
    float s[MT][NB][4]; // S: NB n-tiles of 8 keys per row tile
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < NB; n++)
            s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
    for (int k16 = 0; k16 < D / 16; k16++) {
        uint32_t kb[KC][4]; // B fragments of keys 0..15 (and 16..31)
#pragma unroll
        for (int kc = 0; kc < KC; kc++)
            load_b_pair<D>(kb[kc], Ks, 16 * kc, 16 * k16, lane);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            uint32_t qa[4];
            load_a<D>(qa, Qs, 16 * mt, 16 * k16, lane);
#pragma unroll
            for (int np = 0; np < KC; np++) {
                mma_bf16(s[mt][2 * np], qa, kb[np][0], kb[np][1]);
                mma_bf16(s[mt][2 * np + 1], qa, kb[np][2], kb[np][3]);
            }
        }
    }

    // the online softmax of this lane's rows; element e of n-tile n of row tile mt: row
    // 16 mt + g + 8 (e / 2), key 8n + 2 t4 + e % 2 (g = lane / 4, t4 = lane % 4)
    const int t4 = lane % 4;
    int keys[NB][2]; // the span's key of each of this lane's columns, -1 past the chunk
#pragma unroll
    for (int n = 0; n < NB; n++)
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const int k = k0 + 8 * n + 2 * t4 + c;
            keys[n][c] = !MASKED ? 0 : k < end ? span_key(span, k) : -1;
        }
    uint32_t pa[MT][KC][4]; // bf16(P) as the A fragments of keys 0..15 (and 16..31)
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        float alpha[2];
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            float mx = w.m[mt][rr];
#pragma unroll
            for (int n = 0; n < NB; n++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    float &x = s[mt][n][2 * rr + c];
                    const int key = keys[n][c];
                    x = !MASKED || (key >= 0 && sees(runs[mt][rr], key)) ? x * a.scale_log2 : -INFINITY;
                    mx = fmaxf(mx, x);
                }
            const float m_new = row_max<4>(mx);
            const float m_ref = m_new == -INFINITY ? 0.0f : m_new; // no key seen yet: P, alpha = 0
            alpha[rr] = fast_exp2(w.m[mt][rr] - m_ref);
            float sum = 0.0f;
#pragma unroll
            for (int n = 0; n < NB; n++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    float &x = s[mt][n][2 * rr + c];
                    x = fast_exp2(x - m_ref);
                    sum += x;
                }
            w.l[mt][rr] = w.l[mt][rr] * alpha[rr] + sum; // this lane's share; the quad's sum at the end
            w.m[mt][rr] = m_new;
        }
        if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) // some row's max moved
#pragma unroll
            for (int n = 0; n < D / 8; n++) {
                w.o[mt][n][0] *= alpha[0], w.o[mt][n][1] *= alpha[0];
                w.o[mt][n][2] *= alpha[1], w.o[mt][n][3] *= alpha[1];
            }
#pragma unroll
        for (int kc = 0; kc < KC; kc++) // the rounding point of P V
            a_from_c(pa[mt][kc], s[mt][2 * kc], s[mt][2 * kc + 1]);
    }

    // O += bf16(P) V16: for each 16 columns of V, keys 0..15 (then 16..31)
#pragma unroll
    for (int n16 = 0; n16 < D / 16; n16++)
#pragma unroll
        for (int kc = 0; kc < KC; kc++) {
            uint32_t vb[4];
            load_b_pair_trans<D>(vb, Vs, 16 * n16, 16 * kc, lane);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma_bf16(w.o[mt][2 * n16], pa[mt][kc], vb[0], vb[1]);
                mma_bf16(w.o[mt][2 * n16 + 1], pa[mt][kc], vb[2], vb[3]);
            }
        }
}

// One tile of the warp, masked key by key only when it needs it: tile_step_as is compiled twice.
template <class T>
__device__ __forceinline__ void tile_step(WarpState<T> &w, const bf16 *Qs, const bf16 *stage, const DecodeArgs &a,
                                          const KeyRuns (&runs)[T::MT][2], KeySpan span, int k0, int end, int lane)
{
    if (tile_whole<T>(runs, span, k0, end))
        tile_step_as<T, false>(w, Qs, stage, a, runs, span, k0, end, lane);
    else
        tile_step_as<T, true>(w, Qs, stage, a, runs, span, k0, end, lane);
}

template <class T>
__global__ void __launch_bounds__(T::NT, T::MIN_BLOCKS) split_kernel(DecodeArgs a)
{
    constexpr int D = T::D, MT = T::MT, BR = T::BR, BC = T::BC, NW = T::NW, ST = T::ST;
    extern __shared__ uint4 smem4[];
    bf16 *Qs = reinterpret_cast<bf16 *>(smem4);              // Q16_i  (BR, D), swizzled
    bf16 *ring = Qs + BR * D;                                // per warp: ST stages of K16_t, V16_t
    const AttnProblem &p = a.p;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g8 = lane / 4;
    const int split = blockIdx.x, i0 = blockIdx.y * BR, g = blockIdx.z;
    const int b = g / p.Hkv, kvh = g % p.Hkv, group = p.Hq / p.Hkv;
    const int rows = min(BR, a.R - i0);
    const Causal causal = causal_make(p.causal, p.Tq, seq_keys(&p, b), p.window, p.sink_tokens);
    const KeySpan span = key_span(tile_runs(causal, i0, rows));
    const Chunk chunk = split_chunk(span_count(span), a.splits, split);
    const int n_tiles = tcd_tiles(chunk.end - chunk.first);

    grid_let_next_start(); // the combine's blocks may be scheduled now; they wait for this grid's end
    // Q16_i for every warp, then each warp's first tile on its way before anyone waits for Q
    load_tile_swizzled<BR, D, T::NT>(Qs, a.q + ((size_t)g * a.R + i0) * D, rows, tid);
    cp_async_commit();
    if (tid == 0)
        hbm_dev_add(a.hbm, HBM_READ, (unsigned long long)rows * D * sizeof(bf16) +
                                         (p.page_size > 0 ? sizeof(int32_t) : 0)); // Q16_i, seq_lens[b]

    WarpState<T> w;
    KeyRuns runs[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            runs[mt][rr] = row_runs(causal, i0 + 16 * mt + g8 + 8 * rr);
            w.m[mt][rr] = -INFINITY, w.l[mt][rr] = 0.0f;
#pragma unroll
            for (int n = 0; n < D / 8; n++)
                w.o[mt][n][2 * rr] = w.o[mt][n][2 * rr + 1] = 0.0f;
        }

    // The warp's ring of ST stages: tiles w, w + NW, ... go to stages 0, 1, ..., ST - 1, 0, ... The
    // row index of a tile (a block-table read for a paged cache) is fetched one tile before its
    // copies are issued, so that read's latency is not on the way of the copies.
    bf16 *mine = ring + (size_t)warp * ST * T::STAGE;
    auto row_of_tile = [&](int t) { // this lane's key row of the warp's tile t, -1 past the chunk
        return key_row_index(p, b, kvh, span, chunk.first + t * BC + lane, chunk.end);
    };
#pragma unroll
    for (int j = 0; j < ST - 1; j++) { // the first ST - 1 tiles on their way before anyone waits for Q
        if (warp + j * NW < n_tiles)
            load_tile_kv<T>(mine + j * T::STAGE, a, row_of_tile(warp + j * NW), lane);
        cp_async_commit();
    }
    int ahead = row_of_tile(warp + (ST - 1) * NW);
    cp_async_wait<ST - 1>(); // Q16_i has landed for this thread (the tiles may still be on their way) ...
    __syncthreads();         // ... and for every thread

    /* exercise: begin — the warps' turns: warp w walks tiles w, w + NW, ... of the chunk, each streamed into its own ring of ST stages while the ones before are computed (check 16 --device cuda: o and lse of the cases longer than one tile) | stub: (void)n_tiles; (void)ahead; */
    for (int t = warp, it = 0; t < n_tiles; t += NW, it++) {
        const int k0 = chunk.first + t * BC, next = t + (ST - 1) * NW;
        if (next < n_tiles) // the warp's tile ST - 1 turns ahead streams into the stage freed last turn
            load_tile_kv<T>(mine + ((it + ST - 1) % ST) * T::STAGE, a, ahead, lane);
        cp_async_commit();
        ahead = row_of_tile(next + NW);
        cp_async_wait<ST - 1>(); // this tile has landed for this lane ...
        __syncwarp();            // ... and for the whole warp
        if (lane == 0 && a.hbm)
            hbm_dev_add(a.hbm, HBM_READ, tile_bytes(p, b, span, k0, min(BC, chunk.end - k0)));
        tile_step<T>(w, Qs, mine + (it % ST) * T::STAGE, a, runs, span, k0, chunk.end, lane);
        __syncwarp(); // every lane is done with the stage before a later prefetch overwrites it
    }
    /* exercise: end */
    cp_async_wait<0>();

    // The warps meet: each writes its m, l (summed over the quad) and O into the ring's bytes
    __syncthreads();
    float *m_all = reinterpret_cast<float *>(ring); // (NW, BR)
    float *l_all = m_all + NW * BR;                 // (NW, BR)
    float *o_all = l_all + NW * BR;                 // (NW, BR, OS)
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            const int r = 16 * mt + g8 + 8 * rr;
            const float l = row_sum<4>(w.l[mt][rr]);
            if (lane % 4 == 0)
                m_all[warp * BR + r] = w.m[mt][rr], l_all[warp * BR + r] = l;
#pragma unroll
            for (int n = 0; n < D / 8; n++) {
                float *o = o_all + ((size_t)warp * BR + r) * T::OS + 8 * n + 2 * (lane % 4);
                *reinterpret_cast<float2 *>(o) = make_float2(w.o[mt][n][2 * rr], w.o[mt][n][2 * rr + 1]);
            }
        }
    __syncthreads();

    // Per row: the warps' weights exp2(m_w - m) and 1 / l, with split 0's learned sink logit as
    // one more term of value 0; written over m_all and l_all, lse_s out. Then O_s element by element:
    // 0 for a row that saw no key in this chunk (its P were all 0, but a masked V16 NaN times 0 in
    // the product is NaN) or sees none at all (a NaN sink logit too).
    __shared__ float inv_l[BR], zero_row[BR];
    const size_t rows_total = output_rows(&p);
    const size_t row0 = (size_t)split * rows_total + (size_t)g * a.R + i0; // packed = o's order
    if (tid < rows) {
        const int r = tid;
        const float s2 = p.sinks && split == 0 ? p.sinks[kvh * group + (i0 + r) / p.Tq] * kLog2e : -INFINITY;
        float m = s2;
        for (int x = 0; x < NW; x++)
            m = fmaxf(m, m_all[x * BR + r]);
        const float m_ref = m == -INFINITY ? 0.0f : m;
        float l = s2 == -INFINITY ? 0.0f : exp2f(s2 - m_ref);
        for (int x = 0; x < NW; x++) {
            const float weight = exp2f(m_all[x * BR + r] - m_ref);
            l += weight * l_all[x * BR + r];
            m_all[x * BR + r] = weight;
        }
        const bool empty = l == 0.0f; // l = NaN is a NaN, not an empty chunk
        inv_l[r] = empty ? 0.0f : 1.0f / l;
        zero_row[r] = empty || visible_count(row_runs(causal, i0 + r)) == 0;
        a.out_lse[row0 + r] = empty ? -INFINITY : (m + log2f(l)) * kLn2;
    }
    __syncthreads();
    for (int idx = tid; idx < rows * D; idx += T::NT) {
        const int r = idx / D, c = idx % D;
        float acc = 0.0f;
        for (int x = 0; x < NW; x++)
            acc += m_all[x * BR + r] * o_all[((size_t)x * BR + r) * T::OS + c];
        a.out_o[(row0 + r) * D + c] = zero_row[r] != 0.0f ? 0.0f : acc * inv_l[r];
    }
    if (tid == 0)
        hbm_dev_add(a.hbm, HBM_WRITTEN, (unsigned long long)rows * (D + 1) * sizeof(float));
}

// The mask of an output row's sequence, for the combine (the few fields of AttnProblem it needs,
// so that the kernel's parameters are plain values): seq_lens NULL for a contiguous cache.
struct CombineMask {
    const int *seq_lens;
    int Tk, Tq, causal, window, sink_tokens, R, Hkv;
};

// One block of CT threads per output row: the splits' lse_s and O_s merged. A decode step at B = 1
// has few rows and many splits (32 rows and about 40 splits on an H200), so the threads of a row
// share the work and keep many loads in flight: each split's weight exp(lse_s - lse) is worked out
// once, into shared memory, and the threads share out both the columns and the splits of
// sum_s weight_s O_s, rather than one warp walking the splits one load after another. A row
// that sees no key keeps o = 0 even when a NaN sink logit made its lse NaN (reference.c's rule; a
// finite lse of such a row weighs only zeros). On Hopper the combine is launched to overlap the
// split kernel: its blocks start while the last splits run and wait for them in
// grid_wait_for_previous(), so that a step does not pay the gap between two kernels. Once the
// partials are there, the combine is the step's tail, so its loads do not wait on each other: a
// thread loads its first PREFETCH splits' O_s columns at once, alongside the lse_s, and weighs
// them when the weights are known.
constexpr int CT = 256, MAX_SPLITS = 1024; // threads of a row; splits the combine takes (--splits' top)
constexpr int PREFETCH = 8; // O_s float4s a thread loads before the weights (64 splits at dv = 128)
__global__ void __launch_bounds__(CT) combine_kernel(const float *part_o, const float *part_lse, float *o,
                                                     float *lse, long rows, int dv, int splits,
                                                     unsigned long long *hbm, CombineMask mask)
{
    __shared__ float weight[MAX_SPLITS], scratch[32];
    const long row = blockIdx.x;
    const int tid = threadIdx.x;
    if (tid == 0) {
        hbm_dev_add(hbm, HBM_READ, (unsigned long long)splits * (dv + 1) * sizeof(float));
        hbm_dev_add(hbm, HBM_WRITTEN, (unsigned long long)(dv + 1) * sizeof(float));
    }
    // Thread (gi, c4) sums columns 4 c4 .. 4 c4 + 3 of the splits gi, gi + groups, ... (dv / 4
    // column chunks, CT / (dv / 4) groups: 8 at dv = 128, 16 at dv = 64), so that each thread has
    // a few float4 loads in flight rather than one load per split; the groups' sums meet in
    // shared memory. (The workspace's rows are dv floats, a multiple of 4: 16-byte aligned.)
    const int chunks = dv / 4, groups = CT / chunks, c4 = tid % chunks, gi = tid / chunks;
    auto part = [&](int s) { // this thread's 4 columns of O_s
        return *reinterpret_cast<const float4 *>(part_o + ((size_t)s * rows + row) * dv + 4 * c4);
    };
    grid_wait_for_previous(); // the split kernel's partials are complete and visible
    float4 first[PREFETCH]; // in flight while the weights are worked out
#pragma unroll
    for (int j = 0; j < PREFETCH; j++)
        if (gi + j * groups < splits)
            first[j] = part(gi + j * groups);
    float m = -INFINITY;
    for (int s = tid; s < splits; s += CT) {
        weight[s] = part_lse[(size_t)s * rows + row]; // lse_s for now
        m = fmaxf(m, weight[s]);
    }
    m = block_max(m, scratch); // (it synchronises the block: weight[] is complete)
    const float shift = m == -INFINITY ? 0.0f : m; // every split empty: the terms are 0 (a NaN stays NaN)
    float sum = 0.0f;
    for (int s = tid; s < splits; s += CT)
        sum += expf(weight[s] - shift);
    sum = block_sum(sum, scratch);
    const float total = sum != 0.0f ? shift + logf(sum) : -INFINITY;
    bool sees_none = false;
    if (isnan(total)) { // block-uniform; only then is the row's mask worth a read of seq_lens
        const int b = (int)(row / mask.R / mask.Hkv);
        const int keys = mask.seq_lens ? mask.seq_lens[b] : mask.Tk; // seq_keys's rule
        const Causal c = causal_make(mask.causal, mask.Tq, keys, mask.window, mask.sink_tokens);
        sees_none = visible_count(row_runs(c, (int)(row % mask.R))) == 0;
    }
    const bool zero = total == -INFINITY || sees_none;
    for (int s = tid; s < splits; s += CT) // each thread its own entries: no barrier needed before
        weight[s] = expf(weight[s] - total);
    __syncthreads();
    __shared__ float4 group_sum[CT];
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    auto add = [&](int s, float4 x) {
        const float w = weight[s];
        acc.x += w * x.x, acc.y += w * x.y, acc.z += w * x.z, acc.w += w * x.w;
    };
#pragma unroll
    for (int j = 0; j < PREFETCH; j++)
        if (gi + j * groups < splits)
            add(gi + j * groups, first[j]);
#pragma unroll 4
    for (int s = gi + PREFETCH * groups; s < splits; s += groups)
        add(s, part(s));
    group_sum[tid] = acc;
    __syncthreads();
    if (tid < chunks) {
        for (int k = 1; k < groups; k++) {
            const float4 x = group_sum[k * chunks + tid];
            acc.x += x.x, acc.y += x.y, acc.z += x.z, acc.w += x.w;
        }
        float *out = o + (size_t)row * dv + 4 * tid;
        out[0] = zero ? 0.0f : acc.x, out[1] = zero ? 0.0f : acc.y;
        out[2] = zero ? 0.0f : acc.z, out[3] = zero ? 0.0f : acc.w;
    }
    if (tid == 0)
        lse[row] = total;
}

// Where a split plan puts its blocks: the SMs, and how many blocks of split_kernel<T> one SM holds.
struct GpuUnits {
    int sms, per_sm;
};

// The GPU's units; the first call also raises the kernel's shared-memory limit, so every launch
// path calls it first.
template <class T> int resident_units(GpuUnits *units, FlError *err)
{
    static GpuUnits cached = {0, 0};
    if (cached.sms == 0) {
        int device = 0, sms = 0, per_sm = 0, optin = 0;
        int rc = fl_cuda_status(cudaGetDevice(&device), "stage 16 (tc_decode, cuda): cudaGetDevice", err);
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
                                "stage 16 (tc_decode, cuda): reading the shared-memory limit", err);
        if (rc == FL_OK && (size_t)optin < T::SMEM_BYTES)
            return fl_fail(err, FL_UNSUPPORTED, "stage 16 (tc_decode, cuda) at d = %d needs %zu bytes of shared memory "
                           "a block; this GPU gives a block at most %d (an A100 or H100 has enough)", T::D,
                           T::SMEM_BYTES, optin);
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaFuncSetAttribute(split_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     (int)T::SMEM_BYTES),
                                "stage 16 (tc_decode, cuda): raising the shared-memory limit", err);
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                                "stage 16 (tc_decode, cuda): reading the SM count", err);
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, split_kernel<T>, T::NT,
                                                                              T::SMEM_BYTES),
                                "stage 16 (tc_decode, cuda): occupancy of split_kernel", err);
        if (rc != FL_OK)
            return rc;
        cached = {sms, per_sm > 0 ? per_sm : 1};
    }
    *units = cached;
    return FL_OK;
}

} // namespace

// The split count of `items` work items (query blocks times kv heads times sequences) whose
// longest span has max_keys keys. With fewer items than SMs (a decode step of a small batch),
// each item in splits that give every SM the same number of blocks in one wave: all the blocks an
// SM holds, or, when that takes more than TCD_MANY_SPLITS splits an item, TCD_SM_BLOCKS of them.
// Measured on an H200 (README, "Speed"): at B = 1, Tk = 32768, 33 splits (2 blocks an SM) beat
// both the 49 of 3 an SM (the same split kernel, a longer merge) and the 42 of paged.h's fill (its
// SMs with 3 blocks finished last); at B = 16, 3 splits (3 an SM) beat 2. Splits keep at least
// TCD_MIN_GPU_SPLIT_KEYS keys (two tiles a warp) and are at most 256. With more items than SMs,
// paged.h's fill of the resident places, as stage 11.
static int gpu_split_count(long items, GpuUnits units, int max_keys)
{
    if (items >= units.sms)
        return split_count(items, units.sms * units.per_sm, max_keys, TCD_MIN_SPLIT_KEYS);
    long splits = units.per_sm * units.sms / items; // >= 1: items < SMs
    if (splits > TCD_MANY_SPLITS)
        splits = (units.per_sm < TCD_SM_BLOCKS ? units.per_sm : TCD_SM_BLOCKS) * units.sms / items;
    splits = splits < 256 ? splits : 256; // paged.h's top
    const long most = ceil_div(max_keys, TCD_MIN_GPU_SPLIT_KEYS);
    return (int)(splits < most ? splits : most > 1 ? most : 1);
}

// The split count: ctx->splits, or gpu_split_count's.
template <class T> static int plan_splits(const AttnProblem *p, const RunCtx *ctx, int *splits, FlError *err)
{
    GpuUnits units = {0, 0};
    int rc = resident_units<T>(&units, err);
    *splits = ctx->splits > 0 ? ctx->splits : gpu_split_count(query_blocks(p, T::BR), units, longest_span(p));
    return rc;
}

// The kernel for the problem's head dim and rows; Run is a callable taking the tile type.
template <class Run> static int with_tile(const AttnProblem *p, Run run)
{
    const bool two = tcd_block_rows(packed_rows(p)) == 32;
    if (p->d == 64)
        return two ? run(DecodeTile<64, 2>()) : run(DecodeTile<64, 1>());
    return two ? run(DecodeTile<128, 2>()) : run(DecodeTile<128, 1>());
}

// The partials (splits, B*Hq*Tq, dv + 1 floats), when there is more than one split.
static size_t decode_workspace_bytes(const AttnProblem *p, const RunCtx *ctx, Direction dir)
{
    (void)dir;
    int splits = 1;
    FlError err = {{0}};
    if (p->d != p->dv || (p->d != 64 && p->d != 128))
        return 0; // the forward pass reports the error
    const int rc = with_tile(p, [&](auto tile) { return plan_splits<decltype(tile)>(p, ctx, &splits, &err); });
    return rc == FL_OK ? partials_bytes(p, splits) : 0;
}

template <class T> static int decode_launch(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    int splits = 1;
    int rc = plan_splits<T>(p, ctx, &splits, err); // also raises the shared-memory limit
    if (rc != FL_OK)
        return rc;
    if (splits > MAX_SPLITS) // the combine's weights, in shared memory
        return fl_fail(err, FL_BAD_INPUT, "stage 16 (tc_decode, cuda): %d splits; the combine takes at most %d",
                       splits, MAX_SPLITS);
    DecodeArgs a;
    a.p = *p;
    a.q = reinterpret_cast<const bf16 *>(p->q_bf16);
    a.k = reinterpret_cast<const bf16 *>(p->k_bf16);
    a.v = reinterpret_cast<const bf16 *>(p->v_bf16);
    a.splits = splits, a.R = packed_rows(p);
    a.scale_log2 = p->scale * kLog2e;
    a.out_o = splits > 1 ? (float *)ctx->workspace : t->o;
    a.out_lse = splits > 1 ? a.out_o + (size_t)splits * output_rows(p) * p->dv : t->lse;
    a.hbm = ctx->hbm_dev;
    const dim3 grid((unsigned)splits, (unsigned)ceil_div(a.R, T::BR), (unsigned)(p->B * p->Hkv));
    split_kernel<T><<<grid, T::NT, T::SMEM_BYTES>>>(a);
    rc = fl_cuda_launch_status("split_kernel", err);
    if (rc != FL_OK || splits == 1)
        return rc;
    const long rows = (long)output_rows(p);
    const CombineMask mask = {p->page_size > 0 ? p->seq_lens : NULL, p->Tk, p->Tq, p->causal, p->window,
                              p->sink_tokens, a.R, p->Hkv};
    // launched while the split kernel runs (compute capability 9.0+): cuda_util.h, fl_launch_overlapping
    return fl_cuda_status(fl_launch_overlapping(combine_kernel, dim3((unsigned)rows), dim3(CT), 0, a.out_o, a.out_lse,
                                                t->o, t->lse, rows, p->dv, splits, a.hbm, mask),
                          "combine_kernel", err);
}

static int decode_forward_cuda(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    if (p->d != p->dv || (p->d != 64 && p->d != 128))
        return fl_fail(err, FL_UNSUPPORTED, "stage 16 (tc_decode, cuda) runs head dims d = dv in {64, 128}; this "
                       "case has d = %d, dv = %d", p->d, p->dv);
    if (!p->q_bf16 || !p->k_bf16 || !p->v_bf16)
        return fl_fail(err, FL_BAD_INPUT, "stage 16 (cuda): no bf16 copies of the inputs (the runner makes "
                       "them for a bf16 stage)");
    if (p->Tq <= 0 || p->B <= 0 || p->Hq <= 0)
        return FL_OK; // nothing to compute
    return with_tile(p, [&](auto tile) { return decode_launch<decltype(tile)>(p, t, ctx, err); });
}

static const StageImpl tc_decode = {
    .stage = "16",
    .name = "tc_decode",
    .variant = "",
    .device = DEVICE_CUDA,
    .lesson = "stage 11's paged split-KV decode in bf16: a kv head's packed query rows as an MMA's M",
    .features = FEAT_CAUSAL | FEAT_GQA | FEAT_WINDOW | FEAT_SINK_TOKENS | FEAT_SINKS | FEAT_PAGED,
    .forward = decode_forward_cuda,
    .backward = NULL,
    .workspace_bytes = decode_workspace_bytes,
    .precision = PRECISION_BF16,
    .head_dims = {64, 128},
};

extern "C" const StageImpl *const stage16_tc_decode_cuda[] = {&tc_decode, NULL};
