/* stages/09_mla/mla.cu — multi-head latent attention, one decoding or prefill step, CUDA, float32.
 *
 * The same two variants as mla.c (its header derives the absorption):
 *   naive     cuBLAS up-projects the cache to per-head K, V every step; the cuBLAS naive attention
 *             (common/cuda_naive.cu, stage 08's naive variant) runs on them; cuBLAS projects the
 *             output.
 *   absorbed  cuBLAS folds W_uk into the queries (q_lat_h = q_nope_h W_uk_h^T, one batched GEMM
 *             over heads); latent_attention_kernel attends straight over the cache; cuBLAS folds
 *             W_uv into the output (o_h = o_lat_h W_uv_h) and projects it.
 *
 * latent_attention_kernel: multi-query attention with key width m + p and value width m.
 * One block owns BR = 32 stacked rows of one batch (rope.h: row r is head r % H of token r / H;
 * at decode, Tq = 1, the rows are the heads) and walks the cache in tiles of BC = 32 tokens.
 * Shared memory (floats; widths padded: m to LW = 128 OQ, p to PW = 64; +4 keeps float4 reads
 * of neighbouring rows on distinct banks):
 *   Ql (BR, LW+4), Qp (BR, PW+4)   the rows' [q_lat, q_pe], read once
 *   Kc (BC, LW+4), Kp (BC, PW+4)   the cache tile [ckv_j, kpe_j]; Kc is also the value tile
 *   Sp (4, BR, BC)                 partial scores of the four k-slices    Ps (BR, BC+4)  P~
 * Scores: the 256 threads split the key width into 4 slices of 64 threads (a 4x4 micro-tile of
 * the 32x32 scores each, over LW/4 latent and 16 RoPE columns); the slices are summed in Sp.
 * Softmax and Õ += P~ Kc: warp w owns rows w, w+8, w+16, w+24 (lane = key within the tile for
 * the softmax, and float4 columns 4 (32 q + lane) of Õ for the product), so a row's running max,
 * sum and rescale stay in the registers of one warp. The tile machinery (cp.async, load_tile,
 * mma_abt, mma_ab, store_row) is common/cuda_tiles.cuh. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "attn.h"
#include "kind_mla_stage.h"
#include "cuda_blas.h"
#include "naive.h"
#include "cuda_tiles.cuh"
#include "cuda_util.h"
#include "error.h"
#include "rope.h"
#include "workspace.h"

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int BR = 32, BC = 32, NT = 256, KSLICES = 4, PW = 64;

// ---- the latent attention kernel ------------------------------------------------------------

struct LatentArgs {
    const float *q_lat, *q_pe; // (B Tq H, m), (B Tq H, p): stacked rows
    const float *ckv, *kpe;    // (B, Tk, m), (B, Tk, p)
    float *o_lat;              // (B Tq H, m)
    int B, Tq, Tk, H, m, p, causal;
    float scale_log2;
    bool vec_m, vec_p; // 16-byte copies allowed (m, p multiples of 4, aligned)
    unsigned long long *hbm;
};

template <int OQ> struct LatentTile {
    static constexpr int LW = 128 * OQ, QS = LW + 4, PS = PW + 4, SS = BC + 4;
    static constexpr int SMEM_FLOATS = 2 * BR * QS + 2 * BR * PS + KSLICES * BR * BC + BR * SS;
    static constexpr size_t SMEM_BYTES = SMEM_FLOATS * sizeof(float);
};

template <int OQ> __global__ void __launch_bounds__(NT, 1) latent_attention_kernel(LatentArgs a)
{
    using T = LatentTile<OQ>;
    constexpr int LW = T::LW, QS = T::QS, PS = T::PS, SS = T::SS;
    extern __shared__ float4 smem4[];
    float *Ql = reinterpret_cast<float *>(smem4), *Qp = Ql + BR * QS;
    float *Kc = Qp + BR * PS, *Kp = Kc + BC * QS;
    float *Sp = Kp + BC * PS, *Ps = Sp + KSLICES * BR * BC;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int slice = tid / 64, st = tid % 64, srg = st / 8, scg = st % 8; // scores
    const int b = blockIdx.y, R = a.Tq * a.H, r0 = blockIdx.x * BR, rows = min(BR, R - r0);
    const size_t row0 = (size_t)b * R + r0;
    const float *ckv = a.ckv + (size_t)b * a.Tk * a.m, *kpe = a.kpe + (size_t)b * a.Tk * a.p;
    const int n_keys = keys_seen(a.causal, r0 + rows - 1, a.H, a.Tq, a.Tk);

    load_tile<BR, LW, QS, NT>(Ql, a.q_lat + row0 * a.m, rows, a.m, a.vec_m, tid); // read once
    load_tile<BR, PW, PS, NT>(Qp, a.q_pe + row0 * a.p, rows, a.p, a.vec_p, tid);
    cp_async_commit();
    if (tid == 0)
        hbm_dev_add(a.hbm, HBM_READ, (unsigned long long)rows * (a.m + a.p) * sizeof(float));

    float mx[4], l[4];  // running max (base 2) and sum of rows warp + 8 i, the same in every lane
    float4 o[4][OQ];    // Õ of those rows, float4 columns 4 (32 q + lane)
    zero(o);
    for (int i = 0; i < 4; i++)
        mx[i] = -INFINITY, l[i] = 0.0f;

    for (int j0 = 0; j0 < n_keys; j0 += BC) {
        const int n = min(BC, n_keys - j0);
        __syncthreads(); // Kc, Kp, Ps of the previous tile are free
        load_tile<BC, LW, QS, NT>(Kc, ckv + (size_t)j0 * a.m, n, a.m, a.vec_m, tid);
        load_tile<BC, PW, PS, NT>(Kp, kpe + (size_t)j0 * a.p, n, a.p, a.vec_p, tid);
        cp_async_commit();
        if (tid == 0)
            hbm_dev_add(a.hbm, HBM_READ, (unsigned long long)n * (a.m + a.p) * sizeof(float));
        cp_async_wait<0>();
        __syncthreads(); // the tile (and on the first pass Q) has landed

        // partial scores of this thread's slice: latent columns, then RoPE columns
        float s[4][4];
        zero(s);
        constexpr int LS = LW / KSLICES, PSL = PW / KSLICES;
        mma_abt<4, 4, 8, 8, LS, QS, QS>(s, Ql + slice * LS, Kc + slice * LS, srg, scg);
        mma_abt<4, 4, 8, 8, PSL, PS, PS>(s, Qp + slice * PSL, Kp + slice * PSL, srg, scg);
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++)
                Sp[(slice * BR + srg + 8 * i) * BC + scg + 8 * j] = s[i][j];
        __syncthreads(); // all slices written

        // online softmax of rows warp + 8 i (base 2); lane = key j0 + lane
        for (int i = 0; i < 4; i++) {
            const int r = warp + 8 * i;
            float x = 0.0f;
            for (int k = 0; k < KSLICES; k++)
                x += Sp[(k * BR + r) * BC + lane];
            const bool seen = lane < n && j0 + lane < keys_seen(a.causal, r0 + r, a.H, a.Tq, a.Tk);
            x = seen ? x * a.scale_log2 : -INFINITY;
            const float m_new = fmaxf(mx[i], row_max<32>(x)); // finite: key 0 is seen by every row
            const float alpha = exp2f(mx[i] - m_new), pij = exp2f(x - m_new);
            l[i] = l[i] * alpha + row_sum<32>(pij);
            mx[i] = m_new;
            Ps[r * SS + lane] = pij;
            for (int q = 0; q < OQ; q++)
                o[i][q] = make_float4(o[i][q].x * alpha, o[i][q].y * alpha, o[i][q].z * alpha, o[i][q].w * alpha);
        }
        __syncwarp(); // a warp reads only its own rows of P~

        // Õ += P~ Kc: the cache tile again, now as the values   (BR, m)
        mma_ab<4, OQ, 8, 32, BC, SS, QS>(o, Ps, Kc, warp, lane);
    }

    for (int i = 0; i < 4; i++) {
        const int r = warp + 8 * i;
        if (r < rows)
            store_row<OQ, 32>(a.o_lat + (row0 + r) * a.m, o[i], 1.0f / l[i], a.m, a.vec_m, lane);
    }
    if (tid == 0)
        hbm_dev_add(a.hbm, HBM_WRITTEN, (unsigned long long)rows * a.m * sizeof(float));
}

template <int OQ> int latent_launch(const LatentArgs &a, FlError *err)
{
    using T = LatentTile<OQ>;
    auto kernel = latent_attention_kernel<OQ>;
    int rc = fl_cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 (int)T::SMEM_BYTES),
                            "latent attention: raising the shared-memory limit", err);
    if (rc != FL_OK)
        return rc;
    const dim3 grid((unsigned)ceil_div(a.Tq * a.H, BR), (unsigned)a.B);
    kernel<<<grid, NT, T::SMEM_BYTES>>>(a);
    return fl_cuda_launch_status("latent_attention_kernel", err);
}

// ---- small kernels of the projections --------------------------------------------------------

// RoPE on q_pe (B Tq H, p) in place: row t H + h of token t = b Tq + i, position Tk - Tq + i.
__global__ void rope_kernel(float *q_pe, long long rows, int H, int Tq, int Tk, int p, float theta,
                            unsigned long long *hbm)
{
    const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows)
        return;
    const int token_in_step = (int)((row / H) % Tq);
    rope_rotate(q_pe + row * p, p, Tk - Tq + token_in_step, theta);
    hbm_dev_add(hbm, HBM_READ, (unsigned long long)p * sizeof(float));
    hbm_dev_add(hbm, HBM_WRITTEN, (unsigned long long)p * sizeof(float));
}

// dst (B, H, T, width) columns c0 .. c0 + n - 1 from src rows (B, T, Hs, n): Hs = H, or Hs = 1 to
// give every head the same row (the shared RoPE key). One block per destination row.
__global__ void heads_from_tokens_kernel(const float *src, int Hs, int n, float *dst, int H, int T,
                                         int width, int c0, unsigned long long *hbm)
{
    const long long row = blockIdx.x; // (b H + h) T + t
    const int t = (int)(row % T), h = (int)((row / T) % H);
    const long long b = row / ((long long)T * H);
    const float *s = src + ((b * T + t) * Hs + (Hs == 1 ? 0 : h)) * n;
    for (int c = threadIdx.x; c < n; c += blockDim.x)
        dst[row * width + c0 + c] = s[c];
    if (threadIdx.x == 0) {
        hbm_dev_add(hbm, HBM_READ, (unsigned long long)n * sizeof(float));
        hbm_dev_add(hbm, HBM_WRITTEN, (unsigned long long)n * sizeof(float));
    }
}

// dst (B, T, H, n) from src (B, H, T, n): attention output back to token-major rows.
__global__ void tokens_from_heads_kernel(const float *src, int H, int T, int n, float *dst,
                                         unsigned long long *hbm)
{
    const long long row = blockIdx.x; // (b T + t) H + h
    const int h = (int)(row % H), t = (int)((row / H) % T);
    const long long b = row / ((long long)T * H);
    for (int c = threadIdx.x; c < n; c += blockDim.x)
        dst[row * n + c] = src[((b * H + h) * T + t) * n + c];
    if (threadIdx.x == 0) {
        hbm_dev_add(hbm, HBM_READ, (unsigned long long)n * sizeof(float));
        hbm_dev_add(hbm, HBM_WRITTEN, (unsigned long long)n * sizeof(float));
    }
}

// ---- cuBLAS products, counted as whole-matrix passes ----------------------------------------

// C = op(A) op(B) for `batch` products (M, N, K), counted: A and B read, C written.
int gemm_counted(cublasHandle_t handle, int M, int N, int K, RmOperand A, RmOperand B, float *C, int ldc,
                 long long strideC, int batch, unsigned long long *hbm, const char *what, FlError *err)
{
    int rc = fl_gemm_rm(handle, M, N, K, 1.0f, A, B, 0.0f, C, ldc, strideC, batch, what, err);
    const unsigned long long f = sizeof(float), nb = (unsigned long long)batch;
    if (rc == FL_OK)
        rc = hbm_dev_add_from_host(hbm, f * nb * ((unsigned long long)M * K + (unsigned long long)K * N),
                                   f * nb * M * N, err);
    return rc;
}

RmOperand plain(const float *ptr, int ld) { return RmOperand{ptr, ld, 0, 0}; }

// c_q = x W_dq;  q_nope = c_q W_uq;  q_pe = RoPE(c_q W_qr): token-major (B Tq, H, .)
int project_queries(cublasHandle_t hd, const MlaProblem *p, float *c_q, float *q_nope, float *q_pe,
                    unsigned long long *hbm, FlError *err)
{
    const int N = p->B * p->Tq, H = p->H;
    int rc = gemm_counted(hd, N, p->mq, p->D, plain(p->in[MLA_X], p->D), plain(p->in[MLA_W_DQ], p->mq), c_q,
                          p->mq, 0, 1, hbm, "c_q = x W_dq", err);
    if (rc == FL_OK)
        rc = gemm_counted(hd, N, H * p->dh, p->mq, plain(c_q, p->mq), plain(p->in[MLA_W_UQ], H * p->dh), q_nope,
                          H * p->dh, 0, 1, hbm, "q_nope = c_q W_uq", err);
    if (rc == FL_OK)
        rc = gemm_counted(hd, N, H * p->p, p->mq, plain(c_q, p->mq), plain(p->in[MLA_W_QR], H * p->p), q_pe,
                          H * p->p, 0, 1, hbm, "q_pe = c_q W_qr", err);
    if (rc == FL_OK) {
        const long long rows = (long long)N * H;
        rope_kernel<<<(unsigned)((rows + 127) / 128), 128>>>(q_pe, rows, H, p->Tq, p->Tk, p->p, p->rope_theta,
                                                            hbm);
        rc = fl_cuda_launch_status("rope_kernel", err);
    }
    return rc;
}

// y = o W_o: (B Tq, H dv) (H dv, D)
int output_projection(cublasHandle_t hd, const MlaProblem *p, const float *o, float *y,
                      unsigned long long *hbm, FlError *err)
{
    const int Hdv = p->H * p->dv;
    return gemm_counted(hd, p->B * p->Tq, p->D, Hdv, plain(o, Hdv), plain(p->in[MLA_W_O], p->D), y, p->D, 0, 1,
                        hbm, "y = o W_o", err);
}

// ==== variant absorbed ==========================================================================

bool aligned16(const void *x) { return ((uintptr_t)x & 15u) == 0; }

int latent_attention(const MlaProblem *p, const AbsorbedBuffers &w, unsigned long long *hbm, FlError *err)
{
    LatentArgs a;
    a.q_lat = w.q_lat, a.q_pe = w.q_pe, a.ckv = p->in[MLA_CKV], a.kpe = p->in[MLA_KPE], a.o_lat = w.o_lat;
    a.B = p->B, a.Tq = p->Tq, a.Tk = p->Tk, a.H = p->H, a.m = p->m, a.p = p->p, a.causal = p->causal;
    a.scale_log2 = p->scale * kLog2e;
    a.vec_m = p->m % 4 == 0 && aligned16(a.ckv) && aligned16(a.q_lat) && aligned16(a.o_lat);
    a.vec_p = p->p % 4 == 0 && aligned16(a.kpe) && aligned16(a.q_pe);
    a.hbm = hbm;
    if (p->m <= 128)
        return latent_launch<1>(a, err);
    if (p->m <= 256)
        return latent_launch<2>(a, err);
    return latent_launch<4>(a, err);
}

int absorbed_forward(const MlaProblem *p, float *y, RunCtx *ctx, FlError *err)
{
    if (p->m > 512 || p->p > PW)
        return fl_fail(err, FL_BAD_INPUT,
                       "stage 09 latent attention kernel: m = %d, p = %d; it supports m <= 512 and p <= %d", p->m,
                       p->p, PW);
    cublasHandle_t hd;
    int rc = fl_cublas_handle(&hd, err);
    if (rc != FL_OK)
        return rc;
    AbsorbedBuffers w;
    absorbed_buffers(p, (float *)ctx->workspace, &w);
    unsigned long long *hbm = ctx->hbm_dev;
    const int N = p->B * p->Tq, H = p->H, m = p->m, dh = p->dh, dv = p->dv;
    rc = project_queries(hd, p, w.c_q, w.q_nope, w.q_pe, hbm, err);
    // q_lat_h = q_nope_h W_uk_h^T for every head h: a batch of H products, (N, dh) (dh, m)
    /* exercise: begin — q_lat = q_nope W_uk^T, one batched GEMM (check 09 --device cuda: y.npy) */
    if (rc == FL_OK)
        rc = gemm_counted(hd, N, m, dh, RmOperand{w.q_nope, H * dh, dh, 0},
                          RmOperand{p->in[MLA_W_UK], H * dh, dh, 1}, w.q_lat, H * m, m, H, hbm,
                          "q_lat = q_nope W_uk^T", err);
    /* exercise: end */
    if (rc == FL_OK)
        rc = latent_attention(p, w, hbm, err);
    // o_h = o_lat_h W_uv_h: a batch of H products, (N, m) (m, dv)
    /* exercise: begin — o = o_lat W_uv, one batched GEMM (check 09 --device cuda: y.npy) */
    if (rc == FL_OK)
        rc = gemm_counted(hd, N, dv, m, RmOperand{w.o_lat, H * m, m, 0}, RmOperand{p->in[MLA_W_UV], H * dv, dv, 0},
                          w.o, H * dv, dv, H, hbm, "o = o_lat W_uv", err);
    /* exercise: end */
    if (rc == FL_OK)
        rc = output_projection(hd, p, w.o, y, hbm, err);
    return rc;
}

// ==== variant naive =============================================================================

size_t naive_workspace_bytes(const MlaProblem *p, const RunCtx *ctx)
{
    const AttnProblem a = naive_attention_problem(p);
    return naive_workspace_with(p, cuda_naive_workspace_bytes(&a, ctx, DIR_FWD));
}

int heads_from_tokens(const float *src, int Hs, int n, float *dst, const MlaProblem *p, int T, int width, int c0,
                      unsigned long long *hbm, FlError *err)
{
    heads_from_tokens_kernel<<<(unsigned)((long long)p->B * p->H * T), 128>>>(src, Hs, n, dst, p->H, T, width, c0,
                                                                             hbm);
    return fl_cuda_launch_status("heads_from_tokens_kernel", err);
}

int naive_forward(const MlaProblem *p, float *y, RunCtx *ctx, FlError *err)
{
    cublasHandle_t hd;
    int rc = fl_cublas_handle(&hd, err);
    if (rc != FL_OK)
        return rc;
    NaiveBuffers w;
    naive_buffers(p, (float *)ctx->workspace, &w);
    unsigned long long *hbm = ctx->hbm_dev;
    const int NK = p->B * p->Tk, H = p->H, dh = p->dh, dv = p->dv, dk = dh + p->p;
    rc = project_queries(hd, p, w.c_q, w.q_nope, w.q_pe, hbm, err);
    // K_h = [ckv W_uk_h, kpe] and V_h = ckv W_uv_h for every cached token: the up-projection
    if (rc == FL_OK)
        rc = gemm_counted(hd, NK, H * dh, p->m, plain(p->in[MLA_CKV], p->m), plain(p->in[MLA_W_UK], H * dh), w.k_up,
                          H * dh, 0, 1, hbm, "K = ckv W_uk", err);
    if (rc == FL_OK)
        rc = gemm_counted(hd, NK, H * dv, p->m, plain(p->in[MLA_CKV], p->m), plain(p->in[MLA_W_UV], H * dv), w.v_up,
                          H * dv, 0, 1, hbm, "V = ckv W_uv", err);
    if (rc == FL_OK)
        rc = heads_from_tokens(w.k_up, H, dh, w.k, p, p->Tk, dk, 0, hbm, err);
    if (rc == FL_OK)
        rc = heads_from_tokens(p->in[MLA_KPE], 1, p->p, w.k, p, p->Tk, dk, dh, hbm, err);
    if (rc == FL_OK)
        rc = heads_from_tokens(w.v_up, H, dv, w.v, p, p->Tk, dv, 0, hbm, err);
    if (rc == FL_OK)
        rc = heads_from_tokens(w.q_nope, H, dh, w.q, p, p->Tq, dk, 0, hbm, err);
    if (rc == FL_OK)
        rc = heads_from_tokens(w.q_pe, H, p->p, w.q, p, p->Tq, dk, dh, hbm, err);
    // ordinary attention over the materialised heads (the cuBLAS naive path, common/cuda_naive.cu)
    AttnProblem a = naive_attention_problem(p);
    a.q = w.q, a.k = w.k, a.v = w.v;
    AttnTensors t = {w.o, w.lse, NULL, NULL, NULL, NULL};
    RunCtx inner_ctx = *ctx;
    inner_ctx.workspace = w.inner;
    if (rc == FL_OK)
        rc = cuda_naive_forward(&a, &t, &inner_ctx, err);
    if (rc == FL_OK) {
        tokens_from_heads_kernel<<<(unsigned)((long long)p->B * p->Tq * H), 128>>>(w.o, H, p->Tq, dv, w.o_tok, hbm);
        rc = fl_cuda_launch_status("tokens_from_heads_kernel", err);
    }
    if (rc == FL_OK)
        rc = output_projection(hd, p, w.o_tok, y, hbm, err);
    return rc;
}

} // namespace

static const MlaEntry absorbed_entry = {"mla", absorbed_forward, absorbed_workspace_bytes};
static const MlaEntry naive_entry = {"mla", naive_forward, naive_workspace_bytes};

static const StageImpl mla_cuda_absorbed = {
    .stage = "09", .name = "mla", .variant = "", .device = DEVICE_CUDA,
    .lesson = "MLA, absorbed: W_uk, W_uv folded into query and output (cuBLAS); a kernel attends over the latent cache",
    .kind_entry = &absorbed_entry,
};

static const StageImpl mla_cuda_naive = {
    .stage = "09", .name = "mla", .variant = "naive", .device = DEVICE_CUDA,
    .lesson = "MLA, naive: cuBLAS up-projects the cache to per-head K and V every step, then stage 08 (cuBLAS) "
              "attention",
    .kind_entry = &naive_entry,
};

extern "C" const StageImpl *const stage09_mla_cuda[] = {&mla_cuda_absorbed, &mla_cuda_naive, NULL};
