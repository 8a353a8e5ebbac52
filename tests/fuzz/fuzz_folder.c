/* fuzz_folder.c — header fields and case files of the structured harnesses (fuzz_folder.h). */
#include "fuzz_folder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- header fields ------------------------------------------------------------------------- */

void fuzz_fields_read(FuzzBytes *in, const FuzzField *f, int n, int *v)
{
    for (int i = 0; i < n; i++)
        v[i] = fuzz_range(in, f[i].lo, f[i].hi);
}

void fuzz_fields_write(const FuzzField *f, int n, const int *v, uint8_t *out)
{
    for (int i = 0; i < n; i++) {
        const int x = v[i] < f[i].lo ? f[i].lo : v[i] > f[i].hi ? f[i].hi : v[i];
        out[i] = (uint8_t)(x - f[i].lo);
    }
}

int fuzz_defect_of(int field, int kinds)
{
    return field < 192 ? FUZZ_INTACT : 1 + field % (kinds - 1);
}

/* ---- files ---------------------------------------------------------------------------------- */

int fuzz_folder_add(FuzzFolder *x, const char *name, int ndim, const int64_t *shape, NpyDtype dtype,
                    float scale)
{
    if (x->count >= FUZZ_MAX_FILES)
        fuzz_fail("too many files in one case");
    FuzzFile *f = &x->file[x->count];
    memset(f, 0, sizeof *f);
    f->name = name, f->ndim = ndim, f->dtype = dtype, f->scale = scale;
    memcpy(f->shape, shape, sizeof(int64_t) * (size_t)ndim);
    return x->count++;
}

size_t fuzz_file_numel(const FuzzFile *f)
{
    size_t n = 1;
    for (int i = 0; i < f->ndim; i++)
        n *= (size_t)f->shape[i];
    return n;
}

int fuzz_folder_find(const FuzzFolder *x, const char *name)
{
    for (int i = 0; i < x->count; i++)
        if (strcmp(x->file[i].name, name) == 0)
            return i;
    return -1;
}

int fuzz_folder_reshape(FuzzFolder *x, int index, int arg)
{
    FuzzFile *f = &x->file[index % x->count];
    int64_t *dim = &f->shape[(arg / 3) % f->ndim];
    const int how = arg % 3;
    *dim = how == 0 ? *dim + 1 : how == 1 ? *dim - 1 : 0;
    return *dim == 0;
}

void fuzz_folder_fill(FuzzFolder *x, FuzzBytes *in, int specials)
{
    for (int i = 0; i < x->count; i++) {
        FuzzFile *f = &x->file[i];
        const size_t n = fuzz_file_numel(f);
        f->data = calloc(n + 1, sizeof(float));
        if (!f->data)
            fuzz_fail("out of memory for %s", f->name);
        for (size_t e = 0; f->dtype == NPY_FLOAT32 && e < n; e++)
            f->data[e] = fuzz_value(in, specials) * f->scale;
    }
}

int32_t *fuzz_file_int32(FuzzFile *f) { return (int32_t *)(void *)f->data; }

void fuzz_folder_write(const FuzzFolder *x, const char *dir)
{
    for (int i = 0; i < x->count; i++) {
        const FuzzFile *f = &x->file[i];
        fuzz_write_npy(dir, f->name, f->data, f->ndim, f->shape, f->dtype);
    }
}

void fuzz_folder_free(FuzzFolder *x)
{
    for (int i = 0; i < x->count; i++) {
        free(x->file[i].data);
        x->file[i].data = NULL;
    }
    x->count = 0;
}

void fuzz_clear_case_files(const char *dir)
{
    static const char *const names[] = {
        "case.json", "q.npy",     "k.npy",       "v.npy",           "do.npy",       "sinks.npy",
        "k_pages.npy", "v_pages.npy", "block_table.npy", "seq_lens.npy", "x.npy",     "ckv.npy",
        "kpe.npy",   "w_dq.npy",  "w_uq.npy",    "w_qr.npy",        "w_uk.npy",     "w_uv.npy",
        "w_o.npy"};
    fuzz_remove_files(dir, names, (int)(sizeof names / sizeof names[0]));
}

float fuzz_fan_in_scale(int fan_in)
{
    const int k = (int)lround(0.5 * log2((double)(fan_in > 0 ? fan_in : 1)));
    return ldexpf(1.0f, -k);
}

void fuzz_write_case_json(const char *dir, const char *const *keys, const char *const *values, int n)
{
    char text[1024];
    size_t used = 0;
    used += (size_t)snprintf(text + used, sizeof text - used, "{");
    for (int i = 0, first = 1; i < n && used < sizeof text; i++) {
        if (!values[i])
            continue;
        used += (size_t)snprintf(text + used, sizeof text - used, "%s\"%s\": %s", first ? "" : ", ",
                                 keys[i], values[i]);
        first = 0;
    }
    if (used < sizeof text)
        used += (size_t)snprintf(text + used, sizeof text - used, "}\n");
    fuzz_write_bytes(dir, "case.json", text, used < sizeof text ? used : sizeof text - 1);
}
