/* npy.h — reading and writing NumPy .npy files: little-endian float32 ('<f4'), C order, 0-4 dims.
 * Anything else (other dtype, Fortran order, bad or truncated header, truncated data, trailing
 * bytes) is refused with one line that names the file and the problem. */
#ifndef FLASHLAB_NPY_H
#define FLASHLAB_NPY_H

#include "error.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads path into t (allocates t->data). Returns FL_OK or FL_BAD_INPUT. */
int npy_read(const char *path, Tensor *t, FlError *err);
/* Writes t to path atomically: into a temporary file in the same folder, then renamed, so a
 * failure never leaves a half-written file. Returns FL_OK or FL_BAD_INPUT. */
int npy_write(const char *path, const Tensor *t, FlError *err);

#ifdef __cplusplus
}
#endif
#endif
