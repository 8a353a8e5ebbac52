/* cuda_util.h — the small CUDA helpers every .cu file of flashlab shares (the runner and the
 * stages): checking a CUDA/cuBLAS call into an FlError, a launch that may overlap the kernel before
 * it, ceil_div, device allocations, and the in-kernel HBM byte counter of docs/hbm_model.md.
 *
 * Every CUDA failure becomes one FlError line "CUDA error in <what>: <cudaGetErrorString>" and the
 * status FL_BAD_INPUT (the device could not run this input: out of memory, a bad launch, ...). */
#ifndef FLASHLAB_CUDA_UTIL_H
#define FLASHLAB_CUDA_UTIL_H

#include <cuda_runtime.h>
#include <stddef.h>

#include "attn.h"
#include "error.h"

/* Returns FL_OK for cudaSuccess, else fills err and returns FL_BAD_INPUT. */
static inline int fl_cuda_status(cudaError_t status, const char *what, FlError *err)
{
    if (status == cudaSuccess)
        return FL_OK;
    return fl_fail(err, FL_BAD_INPUT, "CUDA error in %s: %s", what, cudaGetErrorString(status));
}

/* Inside a function returning an FL status: FL_CUDA_TRY(cudaMemcpy(...), "copying q", err);
 * Use it only where nothing needs freeing on failure; elsewhere assign rc = fl_cuda_status(...)
 * and fall through to the function's single cleanup path. */
#define FL_CUDA_TRY(call, what, err)                                                               \
    do {                                                                                           \
        int fl_cuda_rc_ = fl_cuda_status((call), (what), (err));                                   \
        if (fl_cuda_rc_ != FL_OK)                                                                  \
            return fl_cuda_rc_;                                                                    \
    } while (0)

/* The error of the last kernel launch (bad configuration, too much shared memory, ...). */
static inline int fl_cuda_launch_status(const char *kernel, FlError *err)
{
    return fl_cuda_status(cudaGetLastError(), kernel, err);
}

/* ---- programmatic dependent launch (compute capability 9.0 and up) -----------------------------
 * A kernel launched with fl_launch_overlapping() may start while the kernel before it in the stream
 * is still running: once every block of that earlier kernel has called grid_let_next_start() (or
 * ended), the later kernel's blocks are scheduled, and each waits in grid_wait_for_previous() until
 * the earlier kernel has finished and its writes are visible. What it buys is the gap between two
 * kernels: the later one's launch and its blocks' start-up happen under the earlier one's last
 * blocks. On an older GPU the launch is an ordinary one and both calls do nothing. */
static inline __device__ void grid_let_next_start(void)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Call before reading anything the previous kernel in the stream writes. */
static inline __device__ void grid_wait_for_previous(void)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* kernel<<<grid, block, smem>>>(args...) on the default stream, allowed to overlap the kernel before
 * it (above) on a GPU of compute capability 9.0 or more. */
template <class... Params, class... Args>
static inline cudaError_t fl_launch_overlapping(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                                Args... args)
{
    int device = 0, major = 0;
    cudaError_t status = cudaGetDevice(&device);
    if (status == cudaSuccess)
        status = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (status != cudaSuccess)
        return status;
    cudaLaunchAttribute overlap;
    overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    overlap.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = 0;
    config.attrs = &overlap;
    config.numAttrs = major >= 9 ? 1 : 0;
    return cudaLaunchKernelEx(&config, kernel, (Params)args...);
}

static inline __host__ __device__ int ceil_div(int a, int b)
{
    return (a + b - 1) / b;
}

/* cudaMalloc of `bytes` (NULL and FL_OK for 0 bytes); `what` names the tensor in the error. */
static inline int fl_cuda_alloc_bytes(void **dst, size_t bytes, const char *what, FlError *err)
{
    *dst = NULL;
    if (bytes == 0)
        return FL_OK;
    cudaError_t status = cudaMalloc(dst, bytes);
    if (status != cudaSuccess) {
        *dst = NULL;
        return fl_fail(err, FL_BAD_INPUT, "CUDA error in allocating %s (%zu bytes): %s", what, bytes,
                       cudaGetErrorString(status));
    }
    return FL_OK;
}

static inline int fl_cuda_alloc_floats(float **dst, size_t n, const char *what, FlError *err)
{
    void *dev = NULL;
    int rc = fl_cuda_alloc_bytes(&dev, n * sizeof(float), what, err);
    *dst = (float *)dev;
    return rc;
}

/* A device copy of `bytes` bytes of host memory (NULL when host is NULL or bytes == 0). */
static inline int fl_cuda_upload_bytes(void **dst, const void *host, size_t bytes, const char *what,
                                       FlError *err)
{
    *dst = NULL;
    if (!host || bytes == 0)
        return FL_OK;
    int rc = fl_cuda_alloc_bytes(dst, bytes, what, err);
    if (rc != FL_OK)
        return rc;
    rc = fl_cuda_status(cudaMemcpy(*dst, host, bytes, cudaMemcpyHostToDevice), what, err);
    if (rc != FL_OK) {
        cudaFree(*dst);
        *dst = NULL;
    }
    return rc;
}

/* A device copy of a host array of n floats (NULL when host is NULL or n == 0). */
static inline int fl_cuda_upload_floats(float **dst, const float *host, size_t n, const char *what,
                                        FlError *err)
{
    void *dev = NULL;
    int rc = fl_cuda_upload_bytes(&dev, host, n * sizeof(float), what, err);
    *dst = (float *)dev;
    return rc;
}

/* ---- HBM counting (docs/hbm_model.md) --------------------------------------------------------
 * hbm_dev[0] = bytes read from global memory, hbm_dev[1] = bytes written; NULL = counting off.
 * Kernels count in the kernel, once per block per tile: one thread adds the tile's bytes. */
enum { HBM_READ = 0, HBM_WRITTEN = 1 };

static inline __device__ void hbm_dev_add(unsigned long long *hbm_dev, int which,
                                          unsigned long long bytes)
{
    if (hbm_dev && bytes)
        atomicAdd(&hbm_dev[which], bytes);
}

static __global__ void hbm_dev_add_kernel(unsigned long long *hbm_dev, unsigned long long read,
                                          unsigned long long written)
{
    hbm_dev[HBM_READ] += read;
    hbm_dev[HBM_WRITTEN] += written;
}

/* Host side: adds the traffic of a library call (cuBLAS) we cannot count inside, in stream order.
 * Does nothing when counting is off. */
static inline int hbm_dev_add_from_host(unsigned long long *hbm_dev, unsigned long long read,
                                        unsigned long long written, FlError *err)
{
    if (!hbm_dev)
        return FL_OK;
    hbm_dev_add_kernel<<<1, 1>>>(hbm_dev, read, written);
    return fl_cuda_launch_status("hbm_dev_add_kernel", err);
}

#endif
