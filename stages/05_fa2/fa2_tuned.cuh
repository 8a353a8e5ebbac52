/* stages/05_fa2/fa2_tuned.cuh — the performance step of stage 05: the FlashAttention-2 forward of
 * fa2.cu, the same algorithm, tuned (variant "tuned"; fa2.cu includes this file and registers it).
 * README.md walks what each piece of machinery buys. Stage 06 continues this file, not fa2.cu.
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
#include "cuda_fa2_tiles.cuh"
#include "cuda_tiles.cuh"
#include "cuda_util.h"
#include "error.h"

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct Fa2Args {
    const float *q, *k, *v;
    float *o, *lse;
    int Tq, Tk, d, dv, Hq, group; // group = Hq / Hkv (1 until stage 08)
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
    const int bh = blockIdx.y, h = bh % a.Hq, b = bh / a.Hq;
    const int kvh = b * (a.Hq / a.group) + h / a.group;
    const int q0 = blockIdx.x * BR;
    const int rows_q = min(BR, a.Tq - q0);
    const float *q = a.q + ((size_t)bh * a.Tq + q0) * a.d;
    const float *k = a.k + (size_t)kvh * a.Tk * a.d;
    const float *v = a.v + (size_t)kvh * a.Tk * a.dv;
    const int n_tiles = (a.Tk + BC - 1) / BC;

    // Prologue: Q_i, K_0, V_0 in flight, three commit groups.
    load_tile<BR, D, T::QS, NT>(Qs, q, rows_q, a.d, a.vec_qk, tid);
    cp_async_commit();
    load_tile<BC, D, T::KS, NT>(Ks, k, min(BC, a.Tk), a.d, a.vec_qk, tid);
    cp_async_commit();
    load_tile<BC, D, T::VS, NT>(Vs, v, min(BC, a.Tk), a.dv, a.vec_v, tid);
    cp_async_commit();
    if (tid == 0)
        hbm_dev_add(a.hbm, HBM_READ, (unsigned long long)rows_q * a.d * sizeof(float));

    float m[TM], l[TM];   // running max (base 2) and this thread's partial row sums
    float4 o[TM][OQ];     // Õ: unnormalised output rows
    zero(o);
#pragma unroll
    for (int i = 0; i < TM; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }

    for (int t = 0; t < n_tiles; t++) {
        const int kv0 = t * BC, rows_kv = min(BC, a.Tk - kv0);
        cp_async_wait<1>(); // Q_i and K_j have landed (V_j may still be in flight)
        __syncthreads();
        if (tid == 0)
            hbm_dev_add(a.hbm, HBM_READ,
                        (unsigned long long)rows_kv * (a.d + a.dv) * sizeof(float));

        // S = Q_i K_j^T   (Br, Bc): this thread's TM x TN micro-tile
        float s[TM][TN];
        zero(s);
        mma_abt<TM, TN, RG, CG, D, T::QS, T::KS>(s, Qs, Ks, rg, cg);

        // Online softmax in registers (base 2): m_new = max(m, rowmax S), P = exp2(S - m_new),
        // l = exp2(m - m_new) l + rowsum P, Õ = exp2(m - m_new) Õ. Columns past Tk get -inf.
#pragma unroll
        for (int i = 0; i < TM; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < TN; j++) {
                const float x = (cg + CG * j < rows_kv) ? s[i][j] * a.scale_log2 : -INFINITY;
                s[i][j] = x;
                mx = fmaxf(mx, x);
            }
            mx = row_max<CG>(mx);
            const float m_new = fmaxf(m[i], mx); // finite: every tile has >= 1 real column
            const float alpha = exp2f(m[i] - m_new);
            float rowsum = 0.0f;
#pragma unroll
            for (int j = 0; j < TN; j++) {
                const float pij = exp2f(s[i][j] - m_new);
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
            load_tile<BC, D, T::KS, NT>(Ks, k + (size_t)(kv0 + BC) * a.d, min(BC, a.Tk - kv0 - BC),
                                        a.d, a.vec_qk, tid);
        cp_async_commit();

        // Õ += P_ij V_j   (Br, D)
        mma_ab<TM, OQ, RG, CG, BC, T::PS, T::VS>(o, Ps, Vs, rg, cg);
        __syncthreads(); // Vs and Ps free

        if (t + 1 < n_tiles)
            load_tile<BC, D, T::VS, NT>(Vs, v + (size_t)(kv0 + BC) * a.dv, min(BC, a.Tk - kv0 - BC),
                                        a.dv, a.vec_v, tid);
        cp_async_commit();
    }

    // One rescale: O = Õ / l, lse = (m + log2 l) ln 2, written once.
#pragma unroll
    for (int i = 0; i < TM; i++) {
        l[i] = row_sum<CG>(l[i]);
        const int row = rg + RG * i;
        if (row >= rows_q)
            continue;
        store_row<OQ, CG>(a.o + ((size_t)bh * a.Tq + q0 + row) * a.dv, o[i], 1.0f / l[i], a.dv,
                          a.vec_o, cg);
        if (cg == 0)
            a.lse[(size_t)bh * a.Tq + q0 + row] = (m[i] + log2f(l[i])) * kLn2;
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
    dim3 grid((unsigned)ceil_div(a.Tq, BR), (unsigned)heads);
    kernel<<<grid, T::NT, T::SMEM_BYTES, stream>>>(a);
    return fl_cuda_launch_status("fa2_forward_kernel", err);
}

} // namespace

static Fa2Args fa2_args(const AttnProblem *p, AttnTensors *t, const RunCtx *ctx)
{
    Fa2Args a;
    a.q = p->q, a.k = p->k, a.v = p->v, a.o = t->o, a.lse = t->lse;
    a.Tq = p->Tq, a.Tk = p->Tk, a.d = p->d, a.dv = p->dv, a.Hq = p->Hq;
    a.group = p->Hq / p->Hkv;
    a.scale_log2 = p->scale * kLog2e;
    const auto aligned = [](const void *x) { return ((uintptr_t)x & 15u) == 0; };
    a.vec_qk = p->d % 4 == 0 && aligned(p->q) && aligned(p->k);
    a.vec_v = p->dv % 4 == 0 && aligned(p->v);
    a.vec_o = p->dv % 4 == 0 && aligned(t->o);
    a.hbm = ctx->hbm_dev;
    return a;
}

static int fa2_tuned_forward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
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
    const int heads = p->B * p->Hq;
    switch (fa2_padded_dim(p->d, p->dv)) {
    case 32: return fa2_launch<FA2_CONFIG_D32>(a, heads, 0, err);
    case 64: return fa2_launch<FA2_CONFIG_D64>(a, heads, 0, err);
    case 96: return fa2_launch<FA2_CONFIG_D96>(a, heads, 0, err);
    default: return fa2_launch<FA2_CONFIG_D128>(a, heads, 0, err);
    }
}

static const StageImpl fa2_tuned_cuda = {
    "05",
    "fa2",
    "tuned",
    DEVICE_CUDA,
    "the tuned FA2 kernel: cp.async pipelining, register micro-tiles, float4 loads, a "
    "configuration per head dim",
    0u,
    fa2_tuned_forward,
    NULL,
    NULL,
};
