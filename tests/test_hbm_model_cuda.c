/* test_hbm_model_cuda.c — the device HBM counters and workspace of the CUDA stages 01 (cuBLAS
 * naive) and 04 (FlashForward kernel) equal the closed forms of docs/hbm_model.md (CUDA part), on
 * several shapes; the outputs are also compared with a float64 reference so the counts come from a
 * run that really computed attention.
 *
 * Usage: test_hbm_model_cuda 01|04. Returns 77 (skipped) without a CUDA device. The expected
 * numbers are computed here from the doc's formulas, independently of the stage code. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "attn.h"
#include "runner.h"
#include "test_support.h"

/* odd T; Tq < Tk with dv != d and B > 1; Tq > Tk with d = 80; T = 1; several blocks and chunks
 * with d = 128 and partial last tiles */
static const TestShape shapes[] = {
    {1, 2, 37, 37, 24, 24}, {2, 3, 50, 129, 64, 32}, {1, 1, 130, 17, 80, 80},
    {1, 1, 1, 1, 16, 16},   {2, 2, 300, 200, 128, 128},
};
enum { SHAPE_COUNT = sizeof shapes / sizeof shapes[0] };

typedef struct {
    uint64_t read, written, workspace; /* bytes */
} Counts;

static uint64_t div_up(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* ---- docs/hbm_model.md (CUDA), written out again: floats per head, x B H x 4 bytes ---------- */

/* 01 cuda: GEMM S = QK^T reads Q, K, writes S; softmax reads S twice, writes P and lse;
 * GEMM O = PV reads P, V, writes O. Workspace: S. */
static Counts model_01_cuda(const TestShape *s)
{
    const uint64_t BH = (uint64_t)s->B * s->H, Tq = s->Tq, Tk = s->Tk, d = s->d, dv = s->dv;
    Counts e;
    e.read = 4 * BH * (Tq * d + Tk * d + 3 * Tq * Tk + Tk * dv);
    e.written = 4 * BH * (2 * Tq * Tk + Tq + Tq * dv);
    e.workspace = 4 * BH * Tq * Tk;
    return e;
}

/* 04: Br = 32, Bc = 64; nQ query blocks each read all of K and V once; each of the C chunks
 * reads Q, O, m, l and writes O, m, l; O, m, l initialised once; lse written once. Workspace: m, l. */
enum { BR_04 = 32, BC_04 = 64 };
static Counts model_04(const TestShape *s)
{
    const uint64_t BH = (uint64_t)s->B * s->H, Tq = s->Tq, Tk = s->Tk, d = s->d, dv = s->dv;
    const uint64_t nQ = div_up(Tq, BR_04), C = div_up(Tk, BC_04);
    Counts e;
    e.read = 4 * BH * (nQ * Tk * (d + dv) + C * Tq * (d + dv + 2));
    e.written = 4 * BH * ((C + 1) * Tq * (dv + 2) + Tq);
    e.workspace = 4 * BH * 2 * Tq;
    return e;
}

/* Runs impl on one shape with counting on; 0 when counts, workspace and outputs are right. */
static int check_shape(const StageImpl *impl, const TestShape *s,
                       Counts (*model)(const TestShape *))
{
    TestProblem x;
    int failed = 1;
    if (test_problem_make(&x, s, 1234u + (uint64_t)s->Tq * 7u + (uint64_t)s->Tk) != 0) {
        fprintf(stderr, "out of memory\n");
        goto done;
    }
    AttnTensors t;
    memset(&t, 0, sizeof t);
    t.o = x.o, t.lse = x.lse;
    RunCtx opts;
    memset(&opts, 0, sizeof opts);
    RunStats stats;
    FlError err = {{0}};
    int rc = runner_run(impl, DIR_FWD, &x.p, &t, &opts, &stats, &err);
    if (rc != 0) {
        fprintf(stderr, "stage %s: runner_run failed (%d): %s\n", impl->stage, rc, err.msg);
        goto done;
    }
    Counts want = model(s), got = {stats.fwd.bytes_read, stats.fwd.bytes_written, stats.extra_bytes_fwd};
    double max_err = ref_attention_max_error(&x.p, x.o, x.lse, ERR_ABS);
    failed = got.read != want.read || got.written != want.written || got.workspace != want.workspace ||
             !(max_err <= 1e-4);
    printf("stage %s cuda  B=%d H=%d Tq=%d Tk=%d d=%d dv=%d  read %llu (model %llu)  written %llu (model %llu)"
           "  workspace %llu (model %llu)  max err %.2e  %s\n",
           impl->stage, s->B, s->H, s->Tq, s->Tk, s->d, s->dv, (unsigned long long)got.read,
           (unsigned long long)want.read, (unsigned long long)got.written, (unsigned long long)want.written,
           (unsigned long long)got.workspace, (unsigned long long)want.workspace, max_err,
           failed ? "FAIL" : "ok");
done:
    test_problem_free(&x);
    return failed;
}

/* The default CUDA implementation of a stage, from the registry. */
static const StageImpl *cuda_impl(const char *stage)
{
    const StageImpl *const *all = stage_registry();
    for (int i = 0; all[i]; i++)
        if (all[i]->device == DEVICE_CUDA && !strcmp(all[i]->stage, stage) && !all[i]->variant[0])
            return all[i];
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "01") && strcmp(argv[1], "04"))) {
        fprintf(stderr, "usage: test_hbm_model_cuda 01|04\n");
        return 2;
    }
    if (!cuda_device_available()) {
        printf("no CUDA device: skipped (cuda: %s)\n", cuda_device_description());
        return 77;
    }
    const int naive = !strcmp(argv[1], "01");
    const StageImpl *impl = cuda_impl(argv[1]);
    if (!impl) {
        fprintf(stderr, "stage %s has no CUDA implementation in this build\n", argv[1]);
        return 1;
    }
    int failures = 0;
    for (int i = 0; i < SHAPE_COUNT; i++)
        failures += check_shape(impl, &shapes[i], naive ? model_01_cuda : model_04);
    printf("%d of %d shapes failed\n", failures, SHAPE_COUNT);
    return failures ? 1 : 0;
}
