/* cuda_blas.h — cuBLAS for the naive CUDA stages: one handle, status checks, and a row-major
 * strided-batched SGEMM so the stages can write their products the way the math reads.
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

/* One operand of a row-major batched product: base pointer, row stride (ld), batch stride, and
 * whether it enters transposed. */
typedef struct {
    const float *ptr;
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
                                  A.trans ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B.ptr, B.ld,
                                  B.stride, A.ptr, A.ld, A.stride, &beta, C, ldc, strideC, batch),
        what, err);
}

#endif
