/* cuda_blas.h — cuBLAS for the naive CUDA stages: one handle, status checks, and a row-major
 * strided-batched SGEMM (and its bf16 form, for stage 17's projections) so the stages can write
 * their products the way the math reads.
 *
 * Plain fp32: the handle uses cuBLAS's default math mode (no TF32). Header-only: each stage file
 * that includes it creates its own handle on first use (never inside a timed run: the runner
 * warms up first) and keeps it for the process. */
#ifndef FLASHLAB_CUDA_BLAS_H
#define FLASHLAB_CUDA_BLAS_H

#include <cublas_v2.h>

#include "error.h"

static inline int fl_cublas_status(cublasStatus_t status, const char *what, FlError *err)
{
    if (status == CUBLAS_STATUS_SUCCESS)
        return FL_OK;
    return fl_fail(err, FL_BAD_INPUT, "CUDA error in %s: cuBLAS status %d", what, (int)status);
}

static inline int fl_cublas_handle(cublasHandle_t *out, FlError *err)
{
    static cublasHandle_t handle;
    static int created;
    if (!created) {
        if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS)
            return fl_fail(err, FL_BAD_INPUT, "CUDA error in cublasCreate: could not create a cuBLAS handle");
        cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH); /* plain fp32, no TF32 */
        created = 1;
    }
    *out = handle;
    return FL_OK;
}

/* One operand of a row-major batched product: base pointer (float32 for fl_gemm_rm, bf16 for
 * fl_gemm_rm_bf16), row stride (ld), batch stride, and whether it enters transposed. */
typedef struct {
    const void *ptr;
    int ld;
    long long stride;
    int trans;
} RmOperand;

/* C = alpha op(A) op(B) + beta C for `batch` row-major matrices, C (M, N) with row stride ldc and
 * batch stride strideC; op(A) is (M, K), op(B) is (K, N).
 * A row-major matrix is the column-major view of its transpose, so cuBLAS computes
 * C^T = op(B)^T op(A)^T: the operands swap places and keep their transpose flags. */
static inline int fl_gemm_rm(cublasHandle_t handle, int M, int N, int K, float alpha, RmOperand A,
                             RmOperand B, float beta, float *C, int ldc, long long strideC, int batch,
                             const char *what, FlError *err)
{
    return fl_cublas_status(
        cublasSgemmStridedBatched(handle, B.trans ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  A.trans ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, (const float *)B.ptr, B.ld,
                                  B.stride, (const float *)A.ptr, A.ld, A.stride, &beta, C, ldc, strideC, batch),
        what, err);
}

/* C = op(A) op(B) as above with bf16 operands and float32 sums (stage 17): C is bf16, rounded to
 * nearest from the float32 sum, or float32 when c_f32 is set. */
static inline int fl_gemm_rm_bf16(cublasHandle_t handle, int M, int N, int K, RmOperand A, RmOperand B, void *C,
                                  int c_f32, int ldc, long long strideC, int batch, const char *what, FlError *err)
{
    const float alpha = 1.0f, beta = 0.0f;
    return fl_cublas_status(
        cublasGemmStridedBatchedEx(handle, B.trans ? CUBLAS_OP_T : CUBLAS_OP_N, A.trans ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   N, M, K, &alpha, B.ptr, CUDA_R_16BF, B.ld, B.stride, A.ptr, CUDA_R_16BF, A.ld,
                                   A.stride, &beta, C, c_f32 ? CUDA_R_32F : CUDA_R_16BF, ldc, strideC, batch,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        what, err);
}

#endif
