/* fuzz_support.h — what the libFuzzer harnesses of tests/fuzz share: reading the fuzz bytes as
 * numbers, a scratch folder per process for the files a harness writes, the refusal rule for bad
 * input, and running a stage on a loaded case.
 *
 * A harness reports a bug by calling fuzz_fail, which prints one "SUMMARY:" line through the
 * sanitizer's report channel (so it shows even when libFuzzer runs with -close_fd_mask=2) and
 * aborts; libFuzzer then saves the input as a crash file. */
#ifndef FLASHLAB_FUZZ_SUPPORT_H
#define FLASHLAB_FUZZ_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "case.h"
#include "error.h"
#include "npy.h"

/* ---- the fuzz bytes ------------------------------------------------------------------------ */

/* The input, read front to back. Past its end the reader goes on with a pseudo-random stream
 * seeded from the input, so that a short input still describes a whole case and a longer one
 * overrides more of it. */
typedef struct {
    const uint8_t *data;
    size_t size, pos;
    uint64_t stream; /* state of the stream used past the end */
} FuzzBytes;

void fuzz_bytes_init(FuzzBytes *in, const uint8_t *data, size_t size);
uint8_t fuzz_byte(FuzzBytes *in);
/* lo + (next byte mod (hi - lo + 1)): a number in [lo, hi]. */
int fuzz_range(FuzzBytes *in, int lo, int hi);

/* The number one byte stands for (fuzz_value_of); fuzz_value reads the byte. Bytes 0..239 are the
 * grid (b - 120) / 32, i.e. -3.75 .. 3.71875 in steps of 1/32, exact in float32 and in products
 * of a few of them. With `specials`, bytes 240..255 are NaN, +-Inf, huge, tiny and signed-zero
 * values; without, they fold back onto the grid. */
enum { FUZZ_GRID_BYTES = 240, FUZZ_GRID_ZERO = 120 };
float fuzz_value_of(uint8_t byte, int specials);
float fuzz_value(FuzzBytes *in, int specials);
/* The byte whose grid value is nearest x (the inverse of fuzz_value_of on the grid; NaN -> 0). */
uint8_t fuzz_byte_for(float x);

/* ---- failing ------------------------------------------------------------------------------- */

/* Prints "SUMMARY: <harness>: <message>" where the sanitizer reports go, and aborts. */
void fuzz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* The name fuzz_fail puts before each message ("fuzz_npy"). */
void fuzz_set_name(const char *name);

/* A refusal must be FL_BAD_INPUT with a non-empty message of printable characters only (one line:
 * no newline, no escape). `what` names the call for the failure message. */
void fuzz_expect_refusal(const char *what, int rc, const FlError *err);

/* ---- the scratch folder -------------------------------------------------------------------- */

/* This process's folder for the files a harness writes: $TMPDIR, else /dev/shm when writable,
 * else /tmp, then flashlab_fuzz_<tag>_<pid>; made on the first call and removed at exit. */
const char *fuzz_scratch(const char *tag);
/* dir/name into out (4096 bytes). */
void fuzz_path(char *out, const char *dir, const char *name);
/* Removes the named files of dir (a missing one is fine). */
void fuzz_remove_files(const char *dir, const char *const *names, int count);
/* Writes n bytes to dir/name (fuzz_fail when it cannot). */
void fuzz_write_bytes(const char *dir, const char *name, const void *data, size_t n);
/* Writes an .npy file dir/name of shape (ndim dims) holding data, with `dtype` in its header
 * (fuzz_fail when it cannot). */
void fuzz_write_npy(const char *dir, const char *name, const float *data, int ndim,
                    const int64_t *shape, NpyDtype dtype);

/* ---- the file defects of the structured harnesses ------------------------------------------ */

/* What a harness may do to one file of a case it writes; every defect but FUZZ_SHAPE must make
 * case_load refuse the folder. */
typedef enum {
    FUZZ_INTACT = 0,
    FUZZ_TRUNCATE,    /* cut the file short by 1 .. 64 bytes */
    FUZZ_APPEND,      /* one trailing byte after the data */
    FUZZ_OTHER_DTYPE, /* the header names int32 for a float32 file, or float32 for an int32 one */
    FUZZ_SHAPE,       /* one dimension changed: the loader judges whether the case still fits */
    FUZZ_DEFECT_COUNT
} FuzzDefect;

/* Applies a defect other than FUZZ_SHAPE to dir/name, which was written as `dtype` (arg picks
 * the length of a cut, 1 .. 64 bytes). */
void fuzz_damage_file(const char *dir, const char *name, FuzzDefect defect, NpyDtype dtype, int arg);

/* ---- running a stage ------------------------------------------------------------------------- */

/* Settings a harness hands the runner: one thread, and the SRAM size and tile sizes picked by
 * the fuzz bytes (0 = the stage's default). */
typedef struct {
    int sram_kib, block_r, block_c, splits;
} FuzzRunOptions;

/* Reads sram_kib (0 or 1..64), block_r and block_c (0 or 1..16) and splits (0..5). */
void fuzz_read_run_options(FuzzBytes *in, FuzzRunOptions *o);
RunCtx fuzz_run_ctx(const FuzzRunOptions *o);

/* The stage implementation (default CPU variant); fuzz_fail when it is not in this build. */
const StageImpl *fuzz_stage(const char *stage);

/* A stage may refuse a run only for settings the fuzz bytes chose (an SRAM too small for the
 * tiles): then FL_BAD_INPUT with a one-line message. 1 when it ran, 0 when it refused. */
int fuzz_run_accepted(const char *what, int rc, const FlError *err, const FuzzRunOptions *o);

/* Loads the case folder dir. A refusal must follow fuzz_expect_refusal (0 returned); with
 * must_refuse (the harness damaged something, named by `damage`) acceptance is a failure.
 * 1: accepted, the case in *c (case_free it). fuzz_run.c. */
int fuzz_load(const char *dir, int must_refuse, const char *damage, Case *c);

/* Runs a loaded case on the default CPU variant of its stage (attention: 10, forward and, with
 * do.npy, backward; paged: 11; MLA: 09) and compares every output with its float64 reference
 * (fuzz_check.h). fuzz_run.c. */
void fuzz_run_case(const Case *c, const FuzzRunOptions *o);

#endif
