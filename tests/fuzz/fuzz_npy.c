/* fuzz_npy.c — libFuzzer harness of the .npy reader (common/npy.c).
 *
 * The fuzz bytes are written to a file (the reader takes a path) and read as float32 and as
 * int32 (npy_read_as). A refusal must be FL_BAD_INPUT with one printable line that names the file.
 * A file that is accepted is written back with npy_write_as and read again: the second read must
 * accept it and give the same shape and the same data bytes (NaN payloads included), so that the
 * writer produces only what the reader takes and nothing is lost on the way. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_support.h"

static const char *dtype_name(NpyDtype dtype) { return dtype == NPY_INT32 ? "int32" : "float32"; }

static void expect_same(const Tensor *a, const Tensor *b, NpyDtype dtype)
{
    if (a->ndim != b->ndim)
        fuzz_fail("%s round trip: %d dimensions became %d", dtype_name(dtype), a->ndim, b->ndim);
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            fuzz_fail("%s round trip: dimension %d was %lld, read back as %lld", dtype_name(dtype), i,
                      (long long)a->shape[i], (long long)b->shape[i]);
    if (tensor_bytes(a) && memcmp(a->data, b->data, tensor_bytes(a)) != 0)
        fuzz_fail("%s round trip: the data bytes differ", dtype_name(dtype));
}

/* The message of a refusal names the file it is about. */
static void expect_named(const char *path, int rc, const FlError *err, const char *what)
{
    fuzz_expect_refusal(what, rc, err);
    if (!strstr(err->msg, path))
        fuzz_fail("%s: the message does not name the file %s: %s", what, path, err->msg);
}

static void read_write_read(const char *dir, const char *path, NpyDtype dtype)
{
    Tensor t, back;
    FlError err = {{0}};
    int rc = npy_read_as(path, dtype, &t, &err);
    if (rc != FL_OK) {
        expect_named(path, rc, &err, "npy_read_as");
        if (t.data)
            fuzz_fail("npy_read_as refused the file but left data allocated");
        return;
    }
    char copy[4096];
    fuzz_path(copy, dir, "copy.npy");
    rc = npy_write_as(copy, &t, dtype, &err);
    if (rc != FL_OK)
        fuzz_fail("npy_write_as could not write back an accepted %s file: %s", dtype_name(dtype), err.msg);
    rc = npy_read_as(copy, dtype, &back, &err);
    if (rc != FL_OK)
        fuzz_fail("npy_read_as refused what npy_write_as wrote (%s): %s", dtype_name(dtype), err.msg);
    expect_same(&t, &back, dtype);
    tensor_free(&t);
    tensor_free(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_set_name("fuzz_npy");
    const char *dir = fuzz_scratch("npy");
    char path[4096];
    fuzz_write_bytes(dir, "input.npy", data, size);
    fuzz_path(path, dir, "input.npy");
    read_write_read(dir, path, NPY_FLOAT32);
    read_write_read(dir, path, NPY_INT32);
    return 0;
}
