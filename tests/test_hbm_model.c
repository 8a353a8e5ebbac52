/* test_hbm_model.c — the HBM counters and workspace of stages 01, 02, 03 (CPU) equal the closed
 * forms of docs/hbm_model.md, on several shapes and SRAM sizes, and stage 03 obeys its scaling law.
 *
 * Usage: test_hbm_model 01|02|03. The expected numbers are computed here from the doc's formulas,
 * independently of the stage code; the outputs are also compared with a float64 reference. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "hbm.h"
#include "test_support.h"

extern const StageImpl *const stage01_naive_cpu[];
extern const StageImpl *const stage02_chunked_cpu[];
extern const StageImpl *const stage03_tiled_cpu[];

/* odd T; Tq < Tk with dv != d and B > 1; Tq > Tk with d = 80; T = 1 */
static const TestShape shapes[] = {
    {1, 2, 37, 37, 24, 24}, {2, 3, 50, 129, 64, 32}, {1, 1, 130, 17, 80, 80}, {1, 1, 1, 1, 16, 16},
};
enum { SHAPE_COUNT = sizeof shapes / sizeof shapes[0] };

typedef struct {
    uint64_t read, written, workspace; /* bytes */
} Counts;

typedef struct {
    size_t sram_bytes; /* 0 = default */
    int block_r, block_c, threads;
} Setting;

static uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* ---- docs/hbm_model.md, written out again: floats per head, then x B H x 4 bytes ---------- */

static Counts model_01(const TestShape *s, const Setting *c)
{
    (void)c;
    const uint64_t BH = (uint64_t)s->B * s->H, Tq = s->Tq, Tk = s->Tk, d = s->d, dv = s->dv;
    Counts e;
    e.read = 4 * BH * (Tq * d + Tk * d + 2 * Tq * Tk + Tk * dv);
    e.written = 4 * BH * (2 * Tq * Tk + Tq + Tq * dv);
    e.workspace = 4 * BH * Tq * Tk;
    return e;
}

static Counts model_02(const TestShape *s, const Setting *c)
{
    const uint64_t BH = (uint64_t)s->B * s->H, Tq = s->Tq, Tk = s->Tk, d = s->d, dv = s->dv;
    const uint64_t L = c->block_c > 0 ? (uint64_t)c->block_c : 128, C = ceil_div(Tk, L);
    const uint64_t W = min_u64((uint64_t)c->threads, BH);
    Counts e;
    e.read = 4 * BH * (C * Tq * (d + dv + 3) + Tk * (d + dv) + 2 * Tq * Tk + 2 * Tq);
    e.written = 4 * BH * (Tq * (dv + 2) + C * Tq * (dv + 3) + 2 * Tq * Tk + Tq);
    e.workspace = 4 * W * (Tq * min_u64(L, Tk) + 3 * Tq);
    return e;
}

static uint64_t block_c_03(const TestShape *s, const Setting *c)
{
    const uint64_t M = c->sram_bytes ? c->sram_bytes : FLASHLAB_DEFAULT_SRAM_BYTES;
    return c->block_c > 0 ? (uint64_t)c->block_c : max_u64(1, (M / 4) / (4 * (uint64_t)(s->d + s->dv)));
}

static Counts model_03(const TestShape *s, const Setting *c)
{
    const uint64_t BH = (uint64_t)s->B * s->H, Tq = s->Tq, Tk = s->Tk, d = s->d, dv = s->dv;
    const uint64_t C = ceil_div(Tk, block_c_03(s, c)), W = min_u64((uint64_t)c->threads, BH);
    Counts e;
    e.read = 4 * BH * (Tk * (d + dv) + C * Tq * (d + dv + 2));
    e.written = 4 * BH * ((C + 1) * Tq * (dv + 2) + Tq);
    e.workspace = 4 * W * 2 * Tq;
    return e;
}

/* ---- running a stage ---------------------------------------------------------------------- */

/* Runs impl on x with setting c; counts and workspace into *got. Returns the stage's status. */
static int run_stage(const StageImpl *impl, TestProblem *x, const Setting *c, Counts *got,
                     FlError *err)
{
    HbmCounter hbm = {0, 0};
    RunCtx ctx = {.hbm = &hbm, .sram_bytes = c->sram_bytes, .block_r = c->block_r,
                  .block_c = c->block_c, .threads = c->threads};
    got->workspace = impl->workspace_bytes ? impl->workspace_bytes(&x->p, &ctx, DIR_FWD) : 0;
    ctx.workspace = got->workspace ? malloc(got->workspace) : NULL;
    if (got->workspace && !ctx.workspace)
        return fl_fail(err, FL_BAD_INPUT, "out of memory for %llu workspace bytes",
                       (unsigned long long)got->workspace);
    AttnTensors t = {.o = x->o, .lse = x->lse};
    const int status = impl->forward(&x->p, &t, &ctx, err);
    free(ctx.workspace);
    got->read = hbm.bytes_read;
    got->written = hbm.bytes_written;
    return status;
}

/* o and lse against a float64 reference, |out - ref| <= 1e-4 + 1e-4 |ref|; 0 when all agree.
 * Reports the first element that disagrees, in row order (a row's lse before its o). */
static int compare_with_reference(const TestProblem *x, const char *what)
{
    RefAttention ref;
    if (ref_attention(&x->p, &ref) != 0)
        return 1;
    const size_t Tq = x->p.Tq, dv = ref.dv;
    int bad = 0;
    for (size_t r = 0; r < ref.rows && !bad; r++) {
        const size_t bh = r / Tq, i = r % Tq;
        if (!(element_error(x->lse[r], ref.lse[r], ERR_ABS_REL) <= 1e-4)) {
            fprintf(stderr, "  %s: lse[%zu, %zu] = %g, reference %g\n", what, bh, i, x->lse[r],
                    ref.lse[r]);
            bad = 1;
        }
        for (size_t c = 0; c < dv && !bad; c++) {
            const double got = x->o[r * dv + c], o = ref.o[r * dv + c];
            if (!(element_error(got, o, ERR_ABS_REL) <= 1e-4)) {
                fprintf(stderr, "  %s: o[%zu, %zu, %zu] = %g, reference %g\n", what, bh, i, c, got,
                        o);
                bad = 1;
            }
        }
    }
    ref_attention_free(&ref);
    return bad;
}

static int expect_equal(const char *what, const char *name, uint64_t got, uint64_t want)
{
    if (got == want)
        return 0;
    fprintf(stderr, "  %s: %s = %llu, docs/hbm_model.md says %llu\n", what, name,
            (unsigned long long)got, (unsigned long long)want);
    return 1;
}

/* One (shape, setting): counters, workspace and outputs. Returns the number of failures. */
static int check_one(const StageImpl *impl,
                     Counts (*model)(const TestShape *, const Setting *), const TestShape *s,
                     const Setting *c)
{
    char what[200];
    snprintf(what, sizeof what, "stage %s B=%d H=%d Tq=%d Tk=%d d=%d dv=%d M=%zu Br=%d Bc=%d threads=%d",
             impl->stage, s->B, s->H, s->Tq, s->Tk, s->d, s->dv, c->sram_bytes, c->block_r, c->block_c,
             c->threads);
    TestProblem x;
    FlError err = {{0}};
    Counts got;
    if (test_problem_make(&x, s, 1234 + (uint64_t)s->Tq * 7 + (uint64_t)s->Tk)) {
        fprintf(stderr, "  %s: out of memory\n", what);
        test_problem_free(&x);
        return 1;
    }
    int failures = 0;
    const int status = run_stage(impl, &x, c, &got, &err);
    if (status != FL_OK) {
        fprintf(stderr, "  %s: forward returned %d: %s\n", what, status, err.msg);
        failures++;
    } else {
        const Counts want = model(s, c);
        failures += expect_equal(what, "bytes read", got.read, want.read);
        failures += expect_equal(what, "bytes written", got.written, want.written);
        failures += expect_equal(what, "workspace bytes", got.workspace, want.workspace);
        failures += compare_with_reference(&x, what);
    }
    printf("%-4s %s: read %llu written %llu workspace %llu\n", failures ? "FAIL" : "ok", what,
           (unsigned long long)got.read, (unsigned long long)got.written,
           (unsigned long long)got.workspace);
    test_problem_free(&x);
    return failures;
}

static int check_settings(const StageImpl *impl,
                          Counts (*model)(const TestShape *, const Setting *),
                          const Setting *settings, int count)
{
    int failures = 0;
    for (int i = 0; i < SHAPE_COUNT; i++)
        for (int j = 0; j < count; j++)
            failures += check_one(impl, model, &shapes[i], &settings[j]);
    return failures;
}

/* Traffic of stage 03 on one head, B = H = 1, d = dv = 64, with SRAM M; -1 on failure. */
static double traffic_03(int T, size_t M)
{
    const TestShape s = {1, 1, T, T, 64, 64};
    const Setting c = {M, 0, 0, 2};
    TestProblem x;
    Counts got;
    FlError err = {{0}};
    double bytes = -1.0;
    if (test_problem_make(&x, &s, 99) == 0 &&
        run_stage(stage03_tiled_cpu[0], &x, &c, &got, &err) == FL_OK) {
        bytes = (double)(got.read + got.written);
        for (size_t i = 0; i < (size_t)T * 64 && bytes >= 0; i++)
            if (!isfinite(x.o[i]))
                bytes = -1.0;
        for (size_t i = 0; i < (size_t)T && bytes >= 0; i++)
            if (!isfinite(x.lse[i]))
                bytes = -1.0;
    }
    if (bytes < 0)
        fprintf(stderr, "  stage 03 T=%d M=%zu: failed or non-finite output %s\n", T, M, err.msg);
    test_problem_free(&x);
    return bytes;
}

static int check_scaling_03(void)
{
    const double small = traffic_03(2048, 64 * 1024), large = traffic_03(2048, 128 * 1024);
    const double ratio = large / small;
    const int ok = small > 0 && large > 0 && ratio >= 0.45 && ratio <= 0.6;
    printf("%-4s stage 03 T=2048 d=64: traffic %.0f bytes at M=64 KiB, %.0f at M=128 KiB, ratio %.3f "
           "(want 0.45..0.6)\n", ok ? "ok" : "FAIL", small, large, ratio);
    return !ok;
}

/* Tiles that cannot fit in M: FL_BAD_INPUT naming M, not a crash. */
static int check_too_small_03(void)
{
    const TestShape s = {1, 1, 100, 100, 64, 64};
    const Setting c = {4096, 64, 64, 1};
    TestProblem x;
    Counts got;
    FlError err = {{0}};
    int ok = 0;
    if (test_problem_make(&x, &s, 5) == 0) {
        const int status = run_stage(stage03_tiled_cpu[0], &x, &c, &got, &err);
        ok = status == FL_BAD_INPUT && strstr(err.msg, "M=4096") && strstr(err.msg, "Bc=64");
    }
    printf("%-4s stage 03 Br=Bc=64 d=64 in M=4096 bytes fails loudly: \"%s\"\n", ok ? "ok" : "FAIL",
           err.msg);
    test_problem_free(&x);
    return !ok;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_hbm_model 01|02|03\n");
        return 2;
    }
    int failures = 0;
    if (strcmp(argv[1], "01") == 0) {
        const Setting settings[] = {{0, 0, 0, 1}, {0, 0, 0, 2}};
        failures += check_settings(stage01_naive_cpu[0], model_01, settings, 2);
    } else if (strcmp(argv[1], "02") == 0) {
        const Setting settings[] = {{0, 0, 0, 2}, {0, 0, 16, 1}, {0, 0, 7, 2}};
        failures += check_settings(stage02_chunked_cpu[0], model_02, settings, 3);
    } else if (strcmp(argv[1], "03") == 0) {
        const Setting settings[] = {{0, 0, 0, 2},         {16 * 1024, 0, 0, 1}, {64 * 1024, 0, 0, 2},
                                    {128 * 1024, 0, 0, 1}, {64 * 1024, 7, 19, 2}};
        failures += check_settings(stage03_tiled_cpu[0], model_03, settings, 5);
        failures += check_scaling_03();
        failures += check_too_small_03();
    } else {
        fprintf(stderr, "test_hbm_model: unknown stage '%s' (01, 02 or 03)\n", argv[1]);
        return 2;
    }
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
