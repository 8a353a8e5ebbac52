/* test_hbm_model_09.c — stage 09 (MLA): the HBM counters and the workspace of both variants equal
 * the closed forms of docs/hbm_model.md ("Stage 09"), on four shapes (a decode step, Tq = 3 with
 * H = 8, odd sizes without the mask, a latent wider than 128) and, for the absorbed CPU variant,
 * two SRAM sizes; and the two variants agree on y (absorption is exact algebra, so a difference
 * above float32 rounding is a bug in one of them). The golden cases check y itself.
 *
 * Usage: test_hbm_model_09 cpu|cuda (77 without a CUDA device in the cuda mode). The closed forms
 * are written out here again from the doc, independently of the stage code. The naive variant's
 * attention is stage 08's naive implementation: its share is that implementation's own count,
 * measured here on the same (B, H, Tq, Tk, dh + p, dv) problem (stage 08's test checks it). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "hbm_model_driver.h"
#include "random.h"
#include "kind_mla.h"
#include "runner.h"

static const TestMlaShape shapes[] = {
    {2, 1, 37, 24, 16, 4, 16, 32, 8, 16, 1},   /* a decode step */
    {1, 3, 40, 32, 16, 8, 8, 24, 4, 12, 1},    /* three new tokens, 8 heads: blocks straddle tokens */
    {3, 5, 29, 21, 11, 5, 7, 19, 2, 9, 0},     /* odd sizes, no mask */
    {1, 2, 20, 16, 16, 2, 16, 160, 16, 16, 1}, /* latent wider than 128 */
};
enum { SHAPE_COUNT = sizeof shapes / sizeof shapes[0], GPU_BLOCK_ROWS = 32 };

typedef struct {
    uint64_t read, written, workspace; /* floats (workspace: bytes) */
} Model;

/* c_q, q_nope, q_pe (RoPE in place) and the output projection: both variants. */
static Model query_and_output(const MlaProblem *p)
{
    const uint64_t N = (uint64_t)p->B * p->Tq, H = p->H, D = p->D, mq = p->mq, dh = p->dh, pe = p->p,
                   dv = p->dv;
    Model e = {0, 0, 0};
    e.read = N * D + D * mq + 2 * (N * mq) + mq * H * dh + mq * H * pe + N * H * pe + N * H * dv + H * dv * D;
    e.written = N * mq + N * H * dh + N * H * pe + N * H * pe + N * D;
    return e;
}

/* The absorbed variant with blocks of Br stacked rows. */
static Model model_absorbed(const MlaProblem *p, uint64_t Br)
{
    const uint64_t N = (uint64_t)p->B * p->Tq, H = p->H, m = p->m, pe = p->p, dh = p->dh, dv = p->dv;
    const uint64_t R = (uint64_t)p->Tq * H;
    Model e = query_and_output(p);
    e.read += H * (N * dh + m * dh) + H * (N * m + m * dv); /* the W_uk and W_uv folds */
    e.written += N * H * m + N * H * dv;
    for (uint64_t r0 = 0; r0 < R; r0 += Br) { /* latent attention, per batch */
        const uint64_t rows = R - r0 < Br ? R - r0 : Br;
        e.read += p->B * (rows + test_mla_block_keys(p, r0, rows)) * (m + pe);
        e.written += p->B * rows * m;
    }
    e.workspace = 4 * (round16(N * p->mq) + round16(N * H * dh) + round16(N * H * pe) + 2 * round16(N * H * m) +
                       round16(N * H * dv));
    return e;
}

/* Br of the absorbed CPU variant at SRAM size M: Bc = M_f / (4 (2m + p)), Br = min(Bc, m + p). */
static uint64_t cpu_block_rows(const MlaProblem *p, size_t M)
{
    uint64_t Bc = M / 4 / (4 * (uint64_t)(2 * p->m + p->p));
    Bc = Bc ? Bc : 1;
    return Bc < (uint64_t)(p->m + p->p) ? Bc : (uint64_t)(p->m + p->p);
}

static AttnProblem inner_problem(const MlaProblem *p)
{
    AttnProblem a;
    memset(&a, 0, sizeof a);
    a.B = p->B, a.Hq = a.Hkv = p->H, a.Tq = p->Tq, a.Tk = p->Tk, a.d = p->dh + p->p, a.dv = p->dv;
    a.scale = p->scale, a.causal = p->causal;
    return a;
}

/* Stage 08 naive's own count and workspace on the naive variant's attention problem. */
static int inner_counts(const MlaProblem *p, Device device, Model *e)
{
    const StageImpl *impl = stage_find("08", device, "naive");
    TestProblem x;
    AttnProblem a = inner_problem(p);
    const TestShape shape = {a.B, a.Hq, a.Tq, a.Tk, a.d, a.dv};
    const TestFeatures features = {0, a.causal};
    if (!impl || test_problem_make_with(&x, &shape, &features, 7u) != 0) {
        fprintf(stderr, "stage 08 naive missing, or out of memory\n");
        return -1;
    }
    x.p.scale = a.scale;
    HbmPassCounts got;
    int rc = hbm_run_counted(impl, &x, 0, &got);
    test_problem_free(&x);
    e->read = got.fwd.read / 4, e->written = got.fwd.written / 4, e->workspace = got.fwd.workspace;
    return rc;
}

/* The naive variant: up-projections, re-layouts, stage 08 naive, back to token-major. */
static int model_naive(const MlaProblem *p, Device device, Model *e)
{
    Model inner;
    if (inner_counts(p, device, &inner) != 0)
        return -1;
    const uint64_t N = (uint64_t)p->B * p->Tq, NK = (uint64_t)p->B * p->Tk, H = p->H, m = p->m, pe = p->p,
                   dh = p->dh, dv = p->dv, dk = dh + pe;
    *e = query_and_output(p);
    const uint64_t relayout = NK * H * dh + NK * H * pe + NK * H * dv + N * H * dh + N * H * pe + N * H * dv;
    e->read += NK * m + m * H * dh + NK * m + m * H * dv + relayout + inner.read;
    e->written += NK * H * dh + NK * H * dv + relayout + inner.written;
    e->workspace = 4 * (round16(N * p->mq) + round16(N * H * dh) + round16(N * H * pe) + round16(NK * H * dh) +
                        round16(NK * H * dv) + round16(N * H * dk) + round16(NK * H * dk) + round16(NK * H * dv) +
                        round16(N * H * dv) + round16(N * H) + round16(N * H * dv)) +
                   inner.workspace;
    return 0;
}

/* Runs impl with counting on (SRAM size M, or block rows block_r when > 0); y must hold B Tq D floats. */
static int run_counted(const StageImpl *impl, const MlaProblem *p, size_t M, float *y, Model *got)
{
    RunCtx opts;
    memset(&opts, 0, sizeof opts);
    opts.sram_bytes = M, opts.threads = 2;
    RunStats stats;
    FlError err = {{0}};
    if (mla_run(impl, p, y, &opts, &stats, &err) != FL_OK) {
        fprintf(stderr, "stage 09 %s: %s\n", hbm_variant_name(impl->variant), err.msg);
        return -1;
    }
    got->read = stats.fwd.bytes_read / 4, got->written = stats.fwd.bytes_written / 4;
    got->workspace = stats.extra_bytes_fwd;
    return 0;
}

static int report(const char *label, int shape, size_t M, const Model *got, const Model *want)
{
    const int same = got->read == want->read && got->written == want->written && got->workspace == want->workspace;
    printf("%-9s shape %d M %7zu: read %llu (model %llu) written %llu (model %llu) workspace %llu (model %llu)%s\n",
           label, shape, M, (unsigned long long)got->read, (unsigned long long)want->read,
           (unsigned long long)got->written, (unsigned long long)want->written,
           (unsigned long long)got->workspace, (unsigned long long)want->workspace, same ? "" : "  <- differs");
    return same ? 0 : 1;
}

/* Largest |a - b| over |b| + 1e-3, over n floats. */
static double max_rel_diff(const float *a, const float *b, size_t n)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]) / (fabs((double)b[i]) + 1e-3);
        worst = d > worst || d != d ? d : worst;
    }
    return worst;
}

/* Both variants on one shape: counts against the models, and y of one against the other. */
static int check_shape(Device device, int shape, int *checks)
{
    TestMla x;
    if (test_mla_make(&x, &shapes[shape], 9000u + (uint64_t)shape) != 0) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    const MlaProblem *p = &x.p;
    const size_t ny = mla_numel(p, MLA_INPUT_COUNT);
    float *y_abs = malloc(ny * sizeof(float)), *y_naive = malloc(ny * sizeof(float));
    const StageImpl *absorbed = stage_find("09", device, ""), *naive = stage_find("09", device, "naive");
    int failed = 0;
    Model got, want;
    if (!y_abs || !y_naive || !absorbed || !naive) {
        fprintf(stderr, "stage 09 implementations missing on %s, or out of memory\n", device_name(device));
        failed++;
    }
    for (int i = 0; !failed && i < (device == DEVICE_CPU ? HBM_SRAM_COUNT : 1); i++) {
        const size_t M = device == DEVICE_CPU ? hbm_sram_sizes[i] : 0;
        want = model_absorbed(p, device == DEVICE_CPU ? cpu_block_rows(p, M) : GPU_BLOCK_ROWS);
        failed += run_counted(absorbed, p, M ? M : FLASHLAB_DEFAULT_SRAM_BYTES, y_abs, &got) != 0 ||
                  report("absorbed", shape, M, &got, &want);
        (*checks)++;
    }
    if (!failed) {
        failed += model_naive(p, device, &want) != 0 || run_counted(naive, p, FLASHLAB_DEFAULT_SRAM_BYTES, y_naive, &got) != 0 ||
                  report("naive", shape, 0, &got, &want);
        (*checks)++;
    }
    if (!failed) {
        const double diff = max_rel_diff(y_abs, y_naive, ny);
        printf("          shape %d: y absorbed vs naive, max |diff| / (|y| + 1e-3) = %.2e\n", shape, diff);
        failed += !(diff <= 1e-3); /* float32 rounding of two orders of summation, far below a real bug */
        (*checks)++;
    }
    free(y_abs);
    free(y_naive);
    test_mla_free(&x);
    return failed;
}

int main(int argc, char **argv)
{
    Device device;
    int rc = hbm_driver_args(argc, argv, "09", &device);
    if (rc >= 0)
        return rc;
    int failed = 0, checks = 0;
    for (int s = 0; s < SHAPE_COUNT; s++)
        failed += check_shape(device, s, &checks);
    printf("%d of %d checks failed\n", failed, checks);
    return failed ? 1 : 0;
}
