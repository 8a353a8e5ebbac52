/* naive.cu — stage 01 on the GPU: standard attention the way a user first writes it with cuBLAS.
 *
 *   S = scale * Q K^T     (B*Hq, Tq, Tk)   one strided-batched SGEMM over all heads, into HBM
 *   P = softmax(S)        row-wise, stable, in place over S; lse = m + log(l)
 *   O = P V               (B*Hq, Tq, dv)   one strided-batched SGEMM
 *
 * S and P are materialised in HBM (the workspace, B*Hq*Tq*Tk floats): the Theta(T^2) memory and
 * traffic that the later stages remove. Plain fp32: cuBLAS's default math mode, no TF32.
 *
 * HBM counting (when ctx->hbm_dev is set): the two GEMMs are counted from the host as the bytes
 * of the operands they read and the result they write (one pass each, the ideal a GEMM can reach);
 * the softmax kernel counts its own global accesses per row block. See README.md, "CUDA variant". */
#include <math.h>

#include "attn.h"
#include "cuda_blas.h"
#include "cuda_util.h"

enum { SOFTMAX_THREADS = 256 };

/* ---- the row softmax ------------------------------------------------------------------------- */

/* Merge two running (max, sum) pairs of the same row: sum is relative to its own max. While the
 * max is still -inf the shift is 0, never -inf - (-inf); so a NaN score, which fmaxf passes over,
 * still reaches l, and with it lse and the whole row of P (every one depends on it). */
static __device__ void merge_max_sum(float *m, float *l, float m2, float l2)
{
    const float m_new = fmaxf(*m, m2);
    const float shift = m_new == -INFINITY ? 0.0f : m_new;
    *l = *l * expf(*m - shift) + l2 * expf(m2 - shift);
    *m = m_new;
}

/* One block per row of S (B*Hq*Tq rows of Tk scores). Pass 1 reads the row once and keeps a
 * running (max m, sum l) per thread, merged across the block; pass 2 reads it again and writes
 * P = exp(S - m) / l in place. lse = m + log(l). */
static __global__ void softmax_rows_kernel(float *S, float *lse, int Tk,
                                           unsigned long long *hbm_dev)
{
    __shared__ float m_part[SOFTMAX_THREADS], l_part[SOFTMAX_THREADS];
    const size_t row = blockIdx.x;
    float *s = S + row * (size_t)Tk; // (Tk)

    // pass 1: m = max_j s_j, l = sum_j exp(s_j - m), online per thread
    float m = -INFINITY, l = 0.0f;
    for (int j = threadIdx.x; j < Tk; j += blockDim.x)
        merge_max_sum(&m, &l, s[j], 1.0f);
    m_part[threadIdx.x] = m;
    l_part[threadIdx.x] = l;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) {
            float mi = m_part[threadIdx.x], li = l_part[threadIdx.x];
            merge_max_sum(&mi, &li, m_part[threadIdx.x + stride], l_part[threadIdx.x + stride]);
            m_part[threadIdx.x] = mi;
            l_part[threadIdx.x] = li;
        }
        __syncthreads();
    }
    m = m_part[0];
    l = l_part[0];

    // pass 2: P = exp(S - m) / l, in place
    /* exercise: begin — P = exp(S - m) / l in place (check 01 --device cuda: o and lse) */
    const float inv_l = 1.0f / l;
    for (int j = threadIdx.x; j < Tk; j += blockDim.x)
        s[j] = expf(s[j] - m) * inv_l;
    /* exercise: end */

    if (threadIdx.x == 0) {
        lse[row] = m + logf(l);
        const unsigned long long row_bytes = (unsigned long long)Tk * sizeof(float);
        hbm_dev_add(hbm_dev, HBM_READ, 2 * row_bytes);                   // S read twice
        hbm_dev_add(hbm_dev, HBM_WRITTEN, row_bytes + sizeof(float));    // P and lse
    }
}

/* ---- the forward pass -------------------------------------------------------------------------- */

static size_t naive_workspace_bytes(const AttnProblem *p, const RunCtx *ctx, Direction dir)
{
    (void)ctx, (void)dir;
    return (size_t)p->B * p->Hq * p->Tq * p->Tk * sizeof(float); // S, then P in place
}

/* Row-major GEMMs through column-major cuBLAS: a row-major (r x c) matrix is a column-major (c x r)
 * one, so we ask cuBLAS for the transposed product, C^T = op(B)^T op(A)^T.
 *   S^T (Tk x Tq) = K (Tk x d) . Q^T (d x Tq):  A = k viewed as (d x Tk) transposed, B = q as (d x Tq)
 *   O^T (dv x Tq) = V^T (dv x Tk) . P^T (Tk x Tq):  A = v as (dv x Tk), B = P as (Tk x Tq) */
static int naive_forward(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err)
{
    if (p->Hq != p->Hkv)
        return fl_fail(err, FL_UNSUPPORTED, "stage 01 (naive, cuda) needs Hq == Hkv; stage 08 adds GQA");
    cublasHandle_t handle;
    int rc = fl_cublas_handle(&handle, err);
    if (rc != FL_OK)
        return rc;
    const int batch = p->B * p->Hq;
    const long long Tq = p->Tq, Tk = p->Tk, d = p->d, dv = p->dv;
    float *S = (float *)ctx->workspace; // (B, Hq, Tq, Tk)
    const float zero = 0.0f, one = 1.0f, scale = p->scale;

    // S = scale * Q K^T   (Tq, Tk) per head
    /* exercise: begin — S = scale Q K^T, every head in one batched GEMM (check 01 --device cuda: o and lse) | stub: (void)scale; */
    rc = fl_cublas_status(cublasSgemmStridedBatched(handle, CUBLAS_OP_T, CUBLAS_OP_N, (int)Tk, (int)Tq, (int)d,
                                                 &scale, p->k, (int)d, Tk * d, p->q, (int)d, Tq * d,
                                                 &zero, S, (int)Tk, Tq * Tk, batch),
                       "cublasSgemmStridedBatched (S = Q K^T)", err);
    /* exercise: end */
    if (rc != FL_OK)
        return rc;
    rc = hbm_dev_add_from_host(ctx->hbm_dev, 4ull * batch * (Tq * d + Tk * d), 4ull * batch * Tq * Tk, err);
    if (rc != FL_OK)
        return rc;

    // P = softmax(S) row-wise, in place; lse
    softmax_rows_kernel<<<(unsigned)(batch * Tq), SOFTMAX_THREADS>>>(S, t->lse, (int)Tk, ctx->hbm_dev);
    rc = fl_cuda_launch_status("softmax_rows_kernel", err);
    if (rc != FL_OK)
        return rc;

    // O = P V   (Tq, dv) per head
    /* exercise: begin — O = P V, every head in one batched GEMM (check 01 --device cuda: o.npy) | stub: (void)one, (void)zero; */
    rc = fl_cublas_status(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, (int)dv, (int)Tq, (int)Tk,
                                                 &one, p->v, (int)dv, Tk * dv, S, (int)Tk, Tq * Tk,
                                                 &zero, t->o, (int)dv, Tq * dv, batch),
                       "cublasSgemmStridedBatched (O = P V)", err);
    /* exercise: end */
    if (rc != FL_OK)
        return rc;
    return hbm_dev_add_from_host(ctx->hbm_dev, 4ull * batch * (Tq * Tk + Tk * dv), 4ull * batch * Tq * dv, err);
}

static const StageImpl naive_cuda = {
    "01",
    "naive",
    "",
    DEVICE_CUDA,
    "standard attention with cuBLAS: S and P materialised in HBM",
    0,
    naive_forward,
    NULL,
    naive_workspace_bytes,
};

extern "C" const StageImpl *const stage01_naive_cuda[] = {&naive_cuda, NULL};
