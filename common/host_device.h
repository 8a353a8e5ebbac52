/* host_device.h — FL_HD marks a small inline function that both the C and the CUDA side of a
 * stage call (a mask, an index rule): __host__ __device__ under nvcc, nothing under a C compiler.
 * It lets such a rule live once per stage, in a header that name.c and name.cu both include. */
#ifndef FLASHLAB_HOST_DEVICE_H
#define FLASHLAB_HOST_DEVICE_H

#ifdef __CUDACC__
#define FL_HD __host__ __device__
#else
#define FL_HD
#endif

#endif
