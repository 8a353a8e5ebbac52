/* tensor.h — a float32, row-major, contiguous tensor of up to 4 dimensions (host memory). */
#ifndef FLASHLAB_TENSOR_H
#define FLASHLAB_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TENSOR_MAX_DIMS 4

typedef struct {
    float *data; /* NULL = absent */
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
} Tensor;

size_t tensor_numel(const Tensor *t);
size_t tensor_bytes(const Tensor *t);
/* Allocates ndim/shape; data filled with NaN ("poisoned") so an unwritten element fails a check.
 * Returns 0, or -1 when out of memory. */
int tensor_alloc_poisoned(Tensor *t, int ndim, const int64_t *shape);
void tensor_free(Tensor *t);
/* The elements of a tensor read as int32 (npy_read_as with NPY_INT32): same size, other type. */
static inline const int32_t *tensor_int32(const Tensor *t) { return (const int32_t *)(const void *)t->data; }
/* Elements that are NaN or +-Inf; *first (when non-NULL and the count is not 0) gets the flat
 * index of the first. */
size_t tensor_count_nonfinite(const Tensor *t, size_t *first);
/* The index of flat element `flat` of t, "[0, 3, 1]", into buf. */
const char *tensor_index_str(const Tensor *t, size_t flat, char *buf, size_t len);
/* "(1, 4, 512, 64)" into buf. */
const char *tensor_shape_str(const Tensor *t, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
