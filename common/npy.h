/* npy.h — reading and writing NumPy .npy files: little-endian float32 ('<f4'), C order, 0-4 dims;
 * little-endian int32 ('<i4') is read and written only where a case format names it (npy_read_as,
 * npy_write_as).
 * Anything else (other dtype, Fortran order, bad or truncated header, truncated data, trailing
 * bytes) is refused with one line that names the file and the problem. */
#ifndef FLASHLAB_NPY_H
#define FLASHLAB_NPY_H

#include "error.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { NPY_FLOAT32, NPY_INT32 } NpyDtype;

/* Reads path, which must hold float32, into t (allocates t->data). Returns FL_OK or FL_BAD_INPUT. */
int npy_read(const char *path, Tensor *t, FlError *err);
/* The same for a file that must hold `dtype`. For NPY_INT32, t->data holds int32 values (both are
 * 4 bytes): read them through tensor_int32(t). */
int npy_read_as(const char *path, NpyDtype dtype, Tensor *t, FlError *err);
/* Writes t to path atomically: into a temporary file in the same folder, then renamed, so a
 * failure never leaves a half-written file. Returns FL_OK or FL_BAD_INPUT. */
int npy_write(const char *path, const Tensor *t, FlError *err);
/* The same with the dtype written in the header: NPY_INT32 writes t->data's bytes as int32 (the
 * block table and sequence lengths of a paged case, built by tests and fuzzers). */
int npy_write_as(const char *path, const Tensor *t, NpyDtype dtype, FlError *err);

#ifdef __cplusplus
}
#endif
#endif
