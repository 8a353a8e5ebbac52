/* tensor.c — allocation, size and printing of the harness's float32 tensors. */
#include "tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t tensor_numel(const Tensor *t)
{
    size_t n = 1; /* a 0-d tensor holds one element */
    for (int i = 0; i < t->ndim; i++)
        n *= (size_t)t->shape[i];
    return n;
}

size_t tensor_bytes(const Tensor *t)
{
    return tensor_numel(t) * sizeof(float);
}

int tensor_alloc_poisoned(Tensor *t, int ndim, const int64_t *shape)
{
    t->data = NULL;
    t->ndim = ndim;
    for (int i = 0; i < TENSOR_MAX_DIMS; i++)
        t->shape[i] = i < ndim ? shape[i] : 0;
    if (ndim < 0 || ndim > TENSOR_MAX_DIMS)
        return -1;

    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return -1;
        size_t dim = (size_t)shape[i];
        if (dim != 0 && n > SIZE_MAX / sizeof(float) / dim)
            return -1; /* the byte count would overflow */
        n *= dim;
    }
    /* malloc(0) may return NULL; ask for one element so that an empty tensor is still "present" */
    float *data = malloc((n ? n : 1) * sizeof(float));
    if (!data)
        return -1;
    const float poison = nanf(""); /* quiet NaN: any element a stage forgets to write fails the check */
    for (size_t i = 0; i < n; i++)
        data[i] = poison;
    t->data = data;
    return 0;
}

void tensor_free(Tensor *t)
{
    free(t->data);
    t->data = NULL;
}

const char *tensor_shape_str(const Tensor *t, char *buf, size_t len)
{
    if (!buf || len == 0)
        return buf;
    size_t used = 0;
    int n = snprintf(buf, len, "(");
    for (int i = 0; i < t->ndim && n >= 0; i++) {
        used += (size_t)n;
        if (used >= len)
            return buf;
        n = snprintf(buf + used, len - used, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    }
    if (n < 0)
        return buf;
    used += (size_t)n;
    if (used >= len)
        return buf;
    /* NumPy writes a 1-d shape as "(5,)" */
    snprintf(buf + used, len - used, t->ndim == 1 ? ",)" : ")");
    return buf;
}

size_t tensor_count_nonfinite(const Tensor *t, size_t *first)
{
    size_t n = tensor_numel(t), count = 0;
    for (size_t i = 0; i < n && t->data; i++)
        if (!isfinite(t->data[i]) && count++ == 0 && first)
            *first = i;
    return count;
}

const char *tensor_index_str(const Tensor *t, size_t flat, char *buf, size_t len)
{
    int64_t index[TENSOR_MAX_DIMS] = {0};
    for (int i = t->ndim - 1; i >= 0; i--) {
        size_t dim = t->shape[i] > 0 ? (size_t)t->shape[i] : 1;
        index[i] = (int64_t)(flat % dim);
        flat /= dim;
    }
    Tensor as_shape = {NULL, t->ndim, {0}};
    for (int i = 0; i < t->ndim; i++)
        as_shape.shape[i] = index[i];
    tensor_shape_str(&as_shape, buf, len);
    if (len > 0 && buf[0] == '(') { /* "[0, 3, 1]": an index, not a shape */
        size_t n = strlen(buf);
        buf[0] = '[';
        if (n >= 2 && buf[n - 2] == ',' && buf[n - 1] == ')') /* a 1-d "(5,)" */
            buf[n - 2] = ']', buf[n - 1] = '\0';
        else if (n >= 1 && buf[n - 1] == ')')
            buf[n - 1] = ']';
    }
    return buf;
}
