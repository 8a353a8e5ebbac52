/* fuzz_folder.h — the structured harnesses' description of a case folder: its files in a fixed
 * order, each with a shape and a dtype, and its options as a header of fixed fields.
 *
 * A harness and the seed writer (fuzz_seeds.c) build the same description from the same header,
 * so the seed writer can turn a golden case into fuzz bytes that the harness reads back as (nearly)
 * that case: header fields first, then the run options, then one byte per float element of every
 * float32 file in order (fuzz_value), then whatever else the harness reads (fuzz_case_paged: the
 * order of the pages). */
#ifndef FLASHLAB_FUZZ_FOLDER_H
#define FLASHLAB_FUZZ_FOLDER_H

#include <stddef.h>
#include <stdint.h>

#include "fuzz_support.h"
#include "npy.h"

/* ---- header fields ------------------------------------------------------------------------- */

/* One header field: a byte b stands for lo + b mod (hi - lo + 1). */
typedef struct {
    const char *name;
    int lo, hi;
} FuzzField;

/* Reads n fields into v. */
void fuzz_fields_read(FuzzBytes *in, const FuzzField *f, int n, int *v);
/* The bytes that read back as v (each clamped to its field's range) into out (n bytes). */
void fuzz_fields_write(const FuzzField *f, int n, const int *v, uint8_t *out);

/* The defect field (0..255) as a FuzzDefect: mostly FUZZ_INTACT, 1 in 4 a defect; a harness may
 * add defects of its own after FUZZ_DEFECT_COUNT (`kinds` in all). */
int fuzz_defect_of(int field, int kinds);

/* ---- files ---------------------------------------------------------------------------------- */

enum { FUZZ_MAX_FILES = 12 };

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[4];
    NpyDtype dtype;
    float scale; /* float32 values are fuzz_value * scale (a power of two) */
    float *data; /* float32 values, or int32 values stored in the same bytes */
} FuzzFile;

typedef struct {
    FuzzFile file[FUZZ_MAX_FILES];
    int count;
} FuzzFolder;

/* Appends a file (data left NULL); returns its index. */
int fuzz_folder_add(FuzzFolder *x, const char *name, int ndim, const int64_t *shape, NpyDtype dtype,
                    float scale);
size_t fuzz_file_numel(const FuzzFile *f);
/* Index of the file called name, or -1. */
int fuzz_folder_find(const FuzzFolder *x, const char *name);

/* FUZZ_SHAPE: changes one dimension of file `index` (arg picks which, and whether it grows by
 * one, shrinks by one or becomes 0). Returns 1 when it became 0 (a size the loader must refuse). */
int fuzz_folder_reshape(FuzzFolder *x, int index, int arg);

/* Allocates every file's data and fills the float32 ones from the fuzz bytes, in file order;
 * int32 files are zeroed for the caller to fill. */
void fuzz_folder_fill(FuzzFolder *x, FuzzBytes *in, int specials);
/* The int32 view of a file's data. */
int32_t *fuzz_file_int32(FuzzFile *f);

/* Writes every file into dir (fuzz_fail when it cannot). */
void fuzz_folder_write(const FuzzFolder *x, const char *dir);
void fuzz_folder_free(FuzzFolder *x);

/* Removes every name some case kind reads from dir (before a case is written into it). */
void fuzz_clear_case_files(const char *dir);

/* The power of two nearest 1 / sqrt(fan_in): weights scaled by it keep MLA's sums of size 1. */
float fuzz_fan_in_scale(int fan_in);

/* A case.json from the given parts, each left out when its text is NULL; written to dir. */
void fuzz_write_case_json(const char *dir, const char *const *keys, const char *const *values, int n);

#endif
