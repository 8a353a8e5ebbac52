/* test_hbm_model_05.c — stage 05 (FlashAttention-2): the HBM counters equal the closed forms of
 * docs/hbm_model.md (fragment docs/fragments/hbm_05.md), O and lse are written exactly once, and
 * no workspace is used; the outputs are compared with a float64 reference so the counts come from
 * a run that really computed attention.
 *
 * Usage: test_hbm_model_05 cpu|cuda. The cuda mode returns 77 (skipped) without a CUDA device.
 * The expected numbers are computed here from the doc's formulas, independently of the stage. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "attn.h"
#include "hbm.h"
#include "hbm_model_driver.h"
#include "runner.h"
#include "test_support.h"

/* odd T; Tq < Tk with dv != d and B > 1; Tq > Tk with d = 80; T = 1; several query blocks with
 * d = 128 and partial last tiles; d not a multiple of 4 */
static const TestShape shapes[] = {
    {1, 2, 37, 37, 24, 24}, {2, 3, 50, 129, 64, 32},   {1, 1, 130, 17, 80, 80},
    {1, 1, 1, 1, 16, 16},   {2, 2, 300, 200, 128, 128}, {1, 1, 70, 45, 37, 37},
};
enum { SHAPE_COUNT = sizeof shapes / sizeof shapes[0] };

typedef struct {
    uint64_t read, written, workspace; /* bytes */
} Counts;

static uint64_t div_up(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* ---- docs/fragments/hbm_05.md, written out again ------------------------------------------ */

/* Per head: Q read once, K and V read once per query block, O and lse written once.
 *   read    = 4 B H (Tq d + ceil(Tq / Br) Tk (d + dv))
 *   written = 4 B H Tq (dv + 1)           workspace = 0 */
static Counts model_05(const TestShape *s, uint64_t Br)
{
    const uint64_t BH = (uint64_t)s->B * s->H, Tq = s->Tq, Tk = s->Tk, d = s->d, dv = s->dv;
    Counts e;
    e.read = 4 * BH * (Tq * d + div_up(Tq, Br) * Tk * (d + dv));
    e.written = 4 * BH * Tq * (dv + 1);
    e.workspace = 0;
    return e;
}

/* CPU: Br = max(1, min(Bc, d)) with Bc = max(1, (M / 4) / (4 (d + dv))). */
static uint64_t block_r_cpu(const TestShape *s, uint64_t M)
{
    const uint64_t Bc = max_u64(1, (M / 4) / (4 * (uint64_t)(s->d + s->dv)));
    return max_u64(1, min_u64(Bc, (uint64_t)s->d));
}

/* CUDA: the lesson kernel (fa2.cu, the default) has Br = 32 query rows per thread block, every
 * configuration of the tuned one (fa2_tuned.cuh, variant "tuned") Br = 128. */
enum { BR_CUDA_LESSON = 32, BR_CUDA_TUNED = 128 };

/* Runs impl on one shape (SRAM size M for the CPU, 0 otherwise) with counting on; 0 when the
 * counts, the workspace and the outputs are right. */
static int check_shape(const StageImpl *impl, const TestShape *s, size_t M, uint64_t Br)
{
    TestProblem x;
    int failed = 1;
    if (test_problem_make(&x, s, 505u + (uint64_t)s->Tq * 7u + (uint64_t)s->Tk) != 0) {
        fprintf(stderr, "out of memory\n");
        goto done;
    }
    const size_t no = (size_t)s->B * s->H * s->Tq * s->dv, nl = (size_t)s->B * s->H * s->Tq;
    AttnTensors t;
    memset(&t, 0, sizeof t);
    t.o = x.o, t.lse = x.lse;
    RunCtx opts;
    memset(&opts, 0, sizeof opts);
    opts.sram_bytes = M;
    opts.threads = 2;
    RunStats stats;
    FlError err = {{0}};
    const int rc = runner_run(impl, DIR_FWD, &x.p, &t, &opts, &stats, &err);
    if (rc != 0) {
        fprintf(stderr, "stage 05 %s: runner_run failed (%d): %s\n", device_name(impl->device), rc,
                err.msg);
        goto done;
    }
    const Counts want = model_05(s, Br);
    const Counts got = {stats.fwd.bytes_read, stats.fwd.bytes_written, stats.extra_bytes_fwd};
    /* O and lse exactly once: the written bytes are the size of the outputs, no more */
    const uint64_t outputs = (uint64_t)(no + nl) * sizeof(float);
    const double max_err = ref_attention_max_error(&x.p, x.o, x.lse, ERR_ABS_REL);
    failed = got.read != want.read || got.written != want.written || got.written != outputs ||
             got.workspace != 0 || !(max_err <= 1e-4);
    printf("stage 05 %-4s M=%-7zu Br=%-3llu B=%d H=%d Tq=%d Tk=%d d=%d dv=%d  read %llu (model %llu)"
           "  written %llu (model %llu, outputs %llu)  workspace %llu  max err %.2e  %s\n",
           device_name(impl->device), M, (unsigned long long)Br, s->B, s->H, s->Tq, s->Tk, s->d,
           s->dv, (unsigned long long)got.read, (unsigned long long)want.read,
           (unsigned long long)got.written, (unsigned long long)want.written,
           (unsigned long long)outputs, (unsigned long long)got.workspace, max_err,
           failed ? "FAIL" : "ok");
done:
    test_problem_free(&x);
    return failed;
}

int main(int argc, char **argv)
{
    Device device;
    const int status = hbm_driver_args(argc, argv, "05", &device);
    if (status >= 0)
        return status;
    const int cuda = device == DEVICE_CUDA;
    const StageImpl *impl = stage_find("05", cuda ? DEVICE_CUDA : DEVICE_CPU, "");
    const StageImpl *tuned = cuda ? stage_find("05", DEVICE_CUDA, "tuned") : NULL;
    if (!impl || (cuda && !tuned)) {
        fprintf(stderr, "stage 05 has no %s implementation%s in this build\n", argv[1], cuda ? " or no tuned one" : "");
        return 1;
    }
    int failures = 0, runs = 0;
    if (cuda) {
        for (int i = 0; i < SHAPE_COUNT; i++, runs += 2) {
            failures += check_shape(impl, &shapes[i], 0, BR_CUDA_LESSON);
            failures += check_shape(tuned, &shapes[i], 0, BR_CUDA_TUNED);
        }
    } else {
        /* two SRAM sizes: the default and a small one that forces many small tiles */
        const size_t sizes[] = {FLASHLAB_DEFAULT_SRAM_BYTES, 16u * 1024u};
        for (int m = 0; m < 2; m++)
            for (int i = 0; i < SHAPE_COUNT; i++, runs++)
                failures += check_shape(impl, &shapes[i], sizes[m], block_r_cpu(&shapes[i], sizes[m]));
    }
    printf("%d of %d runs failed\n", failures, runs);
    return failures ? 1 : 0;
}
