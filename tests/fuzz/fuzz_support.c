/* fuzz_support.c — the fuzz-byte reader, failing, refusals and the scratch folder of
 * fuzz_support.h, and the run settings. Loading and running a case are in fuzz_run.c. */
#define _GNU_SOURCE /* mkdir, unlink, truncate */
#include "fuzz_support.h"
#include "test_support.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <sanitizer/common_interface_defs.h>

/* ---- the fuzz bytes ------------------------------------------------------------------------ */

void fuzz_bytes_init(FuzzBytes *in, const uint8_t *data, size_t size)
{
    in->data = data, in->size = size, in->pos = 0;
    uint64_t h = 0x243F6A8885A308D3ull ^ size; /* FNV-style hash of the input seeds the stream */
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 0x100000001B3ull;
    in->stream = h;
}

uint8_t fuzz_byte(FuzzBytes *in)
{
    if (in->pos < in->size)
        return in->data[in->pos++];
    uint64_t z = (in->stream += 0x9E3779B97F4A7C15ull); /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (uint8_t)((z ^ (z >> 31)) >> 56);
}

int fuzz_range(FuzzBytes *in, int lo, int hi) { return lo + fuzz_byte(in) % (hi - lo + 1); }

float fuzz_value_of(uint8_t byte, int specials)
{
    static const float special[256 - FUZZ_GRID_BYTES] = {
        NAN,   -NAN,   INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, 1e30f, -1e30f,
        1e15f, -1e15f, 65504.0f, 1e-30f,    1e-40f,  -1e-40f,  -0.0f, 1e-7f,
    };
    if (byte >= FUZZ_GRID_BYTES && specials)
        return special[byte - FUZZ_GRID_BYTES];
    if (byte >= FUZZ_GRID_BYTES)
        byte = (uint8_t)(byte - FUZZ_GRID_BYTES + FUZZ_GRID_ZERO - 8); /* near zero */
    return (float)((int)byte - FUZZ_GRID_ZERO) / 32.0f;
}

float fuzz_value(FuzzBytes *in, int specials) { return fuzz_value_of(fuzz_byte(in), specials); }

uint8_t fuzz_byte_for(float x)
{
    if (!(x == x))
        return FUZZ_GRID_ZERO;
    const float step = roundf(x * 32.0f);
    const float clamped = step < -FUZZ_GRID_ZERO ? -FUZZ_GRID_ZERO
                          : step > FUZZ_GRID_BYTES - 1 - FUZZ_GRID_ZERO ? FUZZ_GRID_BYTES - 1 - FUZZ_GRID_ZERO
                                                                        : step;
    return (uint8_t)((int)clamped + FUZZ_GRID_ZERO);
}

/* ---- failing ------------------------------------------------------------------------------- */

static const char *harness_name = "fuzz";

void fuzz_set_name(const char *name) { harness_name = name; }

void fuzz_fail(const char *fmt, ...)
{
    char msg[1536], line[1600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(line, sizeof line, "SUMMARY: %s: %s", harness_name, msg);
    __sanitizer_report_error_summary(line);
    abort();
}

void fuzz_expect_refusal(const char *what, int rc, const FlError *err)
{
    if (rc != FL_BAD_INPUT)
        fuzz_fail("%s: refused with status %d, expected FL_BAD_INPUT (2): %s", what, rc, err->msg);
    if (err->msg[0] == '\0')
        fuzz_fail("%s: refused without a message", what);
    for (const unsigned char *s = (const unsigned char *)err->msg; *s; s++)
        if (*s < 0x20 || *s == 0x7f)
            fuzz_fail("%s: the message holds control byte 0x%02x (one printable line expected): %s",
                      what, *s, err->msg);
}

/* ---- the scratch folder -------------------------------------------------------------------- */

static char scratch[4096];

static void remove_scratch(void)
{
    if (scratch[0])
        test_tmpdir_remove(scratch);
}

static const char *scratch_root(void)
{
    const char *tmp = getenv("TMPDIR");
    if (tmp && tmp[0])
        return tmp;
    return access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
}

const char *fuzz_scratch(const char *tag)
{
    if (scratch[0])
        return scratch;
    snprintf(scratch, sizeof scratch, "%s/flashlab_fuzz_%s_%ld", scratch_root(), tag, (long)getpid());
    if (mkdir(scratch, 0700) != 0 && access(scratch, W_OK) != 0)
        fuzz_fail("cannot make the scratch folder %s", scratch);
    atexit(remove_scratch);
    return scratch;
}

void fuzz_path(char *out, const char *dir, const char *name)
{
    snprintf(out, 4096, "%s/%s", dir, name);
}

void fuzz_remove_files(const char *dir, const char *const *names, int count)
{
    char path[4096];
    for (int i = 0; i < count; i++) {
        fuzz_path(path, dir, names[i]);
        unlink(path);
    }
}

void fuzz_write_bytes(const char *dir, const char *name, const void *data, size_t n)
{
    char path[4096];
    fuzz_path(path, dir, name);
    FILE *f = fopen(path, "wb");
    const int ok = f && (n == 0 || fwrite(data, 1, n, f) == n);
    if (!f || fclose(f) != 0 || !ok)
        fuzz_fail("cannot write %s", path);
}

void fuzz_write_npy(const char *dir, const char *name, const float *data, int ndim,
                    const int64_t *shape, NpyDtype dtype)
{
    char path[4096];
    fuzz_path(path, dir, name);
    Tensor t = {(float *)data, ndim, {0}};
    memcpy(t.shape, shape, sizeof(int64_t) * (size_t)ndim);
    FlError err = {{0}};
    if (npy_write_as(path, &t, dtype, &err) != FL_OK)
        fuzz_fail("cannot write %s: %s", path, err.msg);
}

/* ---- file defects -------------------------------------------------------------------------- */

/* Changes the dtype named in the header of path from `from` to the other one ('<f4' <-> '<i4'). */
static void rewrite_dtype(const char *path, NpyDtype from)
{
    FILE *f = fopen(path, "r+b");
    char head[128] = {0};
    const size_t n = f ? fread(head, 1, sizeof head - 1, f) : 0;
    char *descr = memmem(head, n, from == NPY_INT32 ? "'<i4'" : "'<f4'", 5); /* the prefix holds NULs */
    if (!f || n == 0 || !descr) {
        if (f)
            fclose(f);
        fuzz_fail("cannot change the dtype of %s", path);
    }
    fseek(f, (long)(descr - head) + 2, SEEK_SET);
    fputc(from == NPY_INT32 ? 'f' : 'i', f);
    fclose(f);
}

void fuzz_damage_file(const char *dir, const char *name, FuzzDefect defect, NpyDtype dtype, int arg)
{
    char path[4096];
    fuzz_path(path, dir, name);
    struct stat st;
    if (stat(path, &st) != 0)
        fuzz_fail("cannot damage %s: it is not there", path);
    const off_t cut = 1 + arg % 64; /* into the data, or into the header of a small file */
    if (defect == FUZZ_TRUNCATE && truncate(path, st.st_size > cut ? st.st_size - cut : 0) != 0)
        fuzz_fail("cannot truncate %s", path);
    if (defect == FUZZ_APPEND) {
        FILE *f = fopen(path, "ab");
        if (!f || fputc(0x3f, f) == EOF || fclose(f) != 0)
            fuzz_fail("cannot append to %s", path);
    }
    if (defect == FUZZ_OTHER_DTYPE)
        rewrite_dtype(path, dtype);
}

/* ---- running options ----------------------------------------------------------------------- */

void fuzz_read_run_options(FuzzBytes *in, FuzzRunOptions *o)
{
    const int sram = fuzz_byte(in);
    o->sram_kib = sram < 192 ? 0 : 1 + sram % 64; /* mostly the default 128 KiB */
    o->block_r = fuzz_range(in, 0, 16);
    o->block_c = fuzz_range(in, 0, 16);
    o->splits = fuzz_range(in, 0, 5);
}

RunCtx fuzz_run_ctx(const FuzzRunOptions *o)
{
    RunCtx ctx = {0};
    ctx.sram_bytes = (size_t)o->sram_kib * 1024;
    ctx.block_r = o->block_r, ctx.block_c = o->block_c;
    ctx.splits = o->splits;
    ctx.threads = 1;
    return ctx;
}

const StageImpl *fuzz_stage(const char *stage)
{
    const StageImpl *impl = stage_find(stage, DEVICE_CPU, "");
    if (!impl)
        fuzz_fail("stage %s (cpu) is not in this build", stage);
    return impl;
}

int fuzz_run_accepted(const char *what, int rc, const FlError *err, const FuzzRunOptions *o)
{
    if (rc == FL_OK)
        return 1;
    const int chosen = o->sram_kib || o->block_r || o->block_c;
    if (!chosen)
        fuzz_fail("%s: the stage refused a case the loader accepted, at its default settings "
                  "(status %d): %s", what, rc, err->msg);
    fuzz_expect_refusal(what, rc, err);
    return 0;
}
