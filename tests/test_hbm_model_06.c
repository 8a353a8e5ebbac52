/* test_hbm_model_06.c — stage 06 (backward): the backward pass's HBM counters and workspace equal
 * the closed forms of docs/hbm_model.md ("Stage 06 — backward (CPU)" and "(CUDA)"), byte for byte, and the
 * gradients match a float64 reference, so the counts come from a run that really computed them.
 * Also checks the scaling law of the extra memory: the flash variant's workspace is linear in T
 * (D, B·Hq·Tq floats), the naive variant's quadratic (P and dP).
 *
 * Usage: test_hbm_model_06 cpu|cuda. Each implementation is one row of `models` (device, variant,
 * closed form); the cuda mode returns 77 without a CUDA device. The expected numbers are computed here from the doc's formulas, not from the stage. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "attn.h"
#include "hbm.h"
#include "hbm_model_driver.h"
#include "runner.h"
#include "test_support.h"

/* odd T; Tq < Tk with dv != d and B > 1; Tq > Tk with d = 80; T = 1; d not a multiple of 4 with
 * several K/V blocks at the small M; d = 128 with partial last blocks */
static const TestShape shapes[] = {
    {1, 2, 37, 37, 24, 24}, {2, 3, 50, 129, 64, 32},   {1, 1, 130, 17, 80, 80},
    {1, 1, 1, 1, 16, 16},   {1, 1, 70, 45, 37, 37},    {1, 2, 200, 150, 128, 128},
};
enum { SHAPE_COUNT = sizeof shapes / sizeof shapes[0] };

/* SRAM sizes M for the CPU rows: the default and a small one that forces many small blocks. */
static const size_t sram_sizes[] = {FLASHLAB_DEFAULT_SRAM_BYTES, 16u * 1024u};
enum { SRAM_COUNT = sizeof sram_sizes / sizeof sram_sizes[0] };

typedef HbmCounts Counts; /* bytes of the backward pass */

static uint64_t div_up(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* ---- docs/hbm_model.md, stage 06, written out again ---------------------------------------- */

/* 06-cpu flash. Bc = max(1, (M / 4) / (4 (d + dv))) keys per K/V block, C = ceil(Tk / Bc) blocks.
 * Per head (floats):
 *   read    = 2 Tq dv            O, dO for D = rowsum(dO ∘ O)
 *           + Tk (d + dv)        K_j, V_j once
 *           + C Tq (2d + dv + 2) per K/V block: Q_i, dO_i, lse_i, D_i, and dQ_i (read-modify-write)
 *   written = Tq                 D
 *           + Tq d               dQ = 0
 *           + C Tq d             dQ_i, per K/V block
 *           + Tk (d + dv)        dK_j, dV_j once
 *   workspace = 4 B Hq Tq bytes (D). Br does not appear. */
static Counts model_flash_cpu(const TestShape *s, size_t M)
{
    const uint64_t N = (uint64_t)s->B * s->H, Tq = s->Tq, Tk = s->Tk, d = s->d, dv = s->dv;
    const uint64_t Bc = max_u64(1, (M / 4) / (4 * (d + dv))), C = div_up(Tk, Bc);
    Counts e;
    e.read = 4 * N * (2 * Tq * dv + Tk * (d + dv) + C * Tq * (2 * d + dv + 2));
    e.written = 4 * N * (Tq + Tq * d + C * Tq * d + Tk * (d + dv));
    e.workspace = 4 * N * Tq;
    return e;
}

/* 06-cpu naive: seven whole-tensor passes (S, P, dV, dP, dS, dQ, dK); per head (floats)
 *   read    = 6 Tq Tk + 2 Tq d + 2 Tk d + 2 Tq dv + Tk dv + Tq
 *   written = 4 Tq Tk + Tq d + Tk d + Tk dv
 *   workspace = 8 B Hq Tq Tk bytes (P and dP). M plays no part. */
static Counts model_naive_cpu(const TestShape *s, size_t M)
{
    (void)M;
    const uint64_t N = (uint64_t)s->B * s->H, Tq = s->Tq, Tk = s->Tk, d = s->d, dv = s->dv;
    Counts e;
    e.read = 4 * N * (6 * Tq * Tk + 2 * Tq * d + 2 * Tk * d + 2 * Tq * dv + Tk * dv + Tq);
    e.written = 4 * N * (4 * Tq * Tk + Tq * d + Tk * d + Tk * dv);
    e.workspace = 8 * N * Tq * Tk;
    return e;
}

/* 06-cuda: Br = Bc = 64 in both backward kernels; C = ceil(Tk / 64) K/V tiles, R = ceil(Tq / 64)
 * query tiles. Default variant (dQ by atomics), per head (floats):
 *   read    = 2 Tq dv + Tk (d + dv) + C Tq (d + dv + 2)  D kernel; K_j, V_j once; Q_i, dO_i, lse_i, D_i
 *           + C Tq d                                    the dQ atomics (each a read and a write)
 *   written = Tq + Tq d + Tk (d + dv) + C Tq d          D; dQ = 0; dK, dV once; the dQ atomics
 *   workspace = 4 B Hq Tq bytes (D). */
enum { CUDA_TILE = 64 };

static Counts model_flash_cuda(const TestShape *s, size_t M)
{
    (void)M;
    const uint64_t N = (uint64_t)s->B * s->H, Tq = s->Tq, Tk = s->Tk, d = s->d, dv = s->dv;
    const uint64_t C = div_up(Tk, CUDA_TILE);
    Counts e;
    e.read = 4 * N * (2 * Tq * dv + Tk * (d + dv) + C * Tq * (d + dv + 2) + C * Tq * d);
    e.written = 4 * N * (Tq + Tq * d + Tk * (d + dv) + C * Tq * d);
    e.workspace = 4 * N * Tq;
    return e;
}

/* 06-cuda deterministic: no atomics; the dQ kernel reads Q_i, dO_i, lse_i, D_i once per query
 * tile, all of K and V per query tile, and writes dQ once:
 *   read    = 2 Tq dv + Tk (d + dv) + C Tq (d + dv + 2) + Tq (d + dv + 2) + R Tk (d + dv)
 *   written = Tq + Tk (d + dv) + Tq d */
static Counts model_deterministic_cuda(const TestShape *s, size_t M)
{
    (void)M;
    const uint64_t N = (uint64_t)s->B * s->H, Tq = s->Tq, Tk = s->Tk, d = s->d, dv = s->dv;
    const uint64_t C = div_up(Tk, CUDA_TILE), R = div_up(Tq, CUDA_TILE);
    Counts e;
    e.read = 4 * N * (2 * Tq * dv + Tk * (d + dv) + C * Tq * (d + dv + 2) + Tq * (d + dv + 2) +
                      R * Tk * (d + dv));
    e.written = 4 * N * (Tq + Tk * (d + dv) + Tq * d);
    e.workspace = 4 * N * Tq;
    return e;
}

/* 06-cuda naive (cuBLAS): S, P, dV, dP, dS (two passes over P and dP), dQ, dK; per head (floats)
 *   read    = 8 Tq Tk + 2 Tq d + 2 Tk d + 2 Tq dv + Tk dv + Tq
 *   written = 4 Tq Tk + Tq d + Tk d + Tk dv
 *   workspace = 8 B Hq Tq Tk bytes (P and dP). */
static Counts model_naive_cuda(const TestShape *s, size_t M)
{
    (void)M;
    const uint64_t N = (uint64_t)s->B * s->H, Tq = s->Tq, Tk = s->Tk, d = s->d, dv = s->dv;
    Counts e;
    e.read = 4 * N * (8 * Tq * Tk + 2 * Tq * d + 2 * Tk * d + 2 * Tq * dv + Tk * dv + Tq);
    e.written = 4 * N * (4 * Tq * Tk + Tq * d + Tk * d + Tk * dv);
    e.workspace = 8 * N * Tq * Tk;
    return e;
}

/* One implementation and its closed form. A CUDA row is added by writing its model function
 * (M is 0 for rows with uses_sram = 0). workspace_power: the extra memory grows as T^power. */
typedef struct {
    Device device;
    const char *variant;
    Counts (*model)(const TestShape *s, size_t M);
    int uses_sram;
    int workspace_power;
} ModelRow;

static const ModelRow models[] = {
    {DEVICE_CPU, "", model_flash_cpu, 1, 1},
    {DEVICE_CPU, "naive", model_naive_cpu, 0, 2},
    {DEVICE_CUDA, "", model_flash_cuda, 0, 1},
    {DEVICE_CUDA, "deterministic", model_deterministic_cuda, 0, 1},
    {DEVICE_CUDA, "naive", model_naive_cuda, 0, 2},
};
enum { MODEL_COUNT = sizeof models / sizeof models[0] };

/* Runs one row on one shape with counting on; 0 when the backward counts, the workspace and the
 * outputs are right. */
static int check_shape(const StageImpl *impl, const ModelRow *row, const TestShape *s, size_t M)
{
    TestProblem x;
    int failed = 1;
    const uint64_t seed = 606u + (uint64_t)s->Tq * 7u + (uint64_t)s->Tk;
    if (test_problem_make(&x, s, seed) != 0 || test_problem_add_backward(&x, seed + 1) != 0) {
        fprintf(stderr, "out of memory\n");
        goto done;
    }
    HbmPassCounts counted;
    if (hbm_run_counted(impl, &x, M, &counted) != 0)
        goto done;
    const Counts want = row->model(s, M);
    const Counts got = counted.bwd;
    const double err_fwd = ref_attention_max_error(&x.p, x.o, x.lse, ERR_ABS_REL);
    const double err_bwd = ref_gradients_max_error(&x.p, x.dq, x.dk, x.dv, ERR_ABS_REL);
    /* docs/conventions.md: atol = rtol = 1e-4 for o and lse, 5e-4 for the gradients */
    char sram[24] = "-"; /* M, for the rows that use it */
    if (row->uses_sram)
        snprintf(sram, sizeof sram, "%zu", M);
    failed = got.read != want.read || got.written != want.written ||
             got.workspace != want.workspace || !(err_fwd <= 1e-4) || !(err_bwd <= 5e-4);
    printf("stage 06 %-4s %-5s M=%-7s B=%d H=%d Tq=%d Tk=%d d=%d dv=%d  read %llu (model %llu)"
           "  written %llu (model %llu)  workspace %llu (model %llu)  err o/lse %.1e  grads %.1e  %s\n",
           device_name(row->device), row->variant[0] ? row->variant : "flash", sram, s->B, s->H,
           s->Tq, s->Tk, s->d, s->dv, (unsigned long long)got.read, (unsigned long long)want.read,
           (unsigned long long)got.written, (unsigned long long)want.written,
           (unsigned long long)got.workspace, (unsigned long long)want.workspace, err_fwd, err_bwd,
           failed ? "FAIL" : "ok");
done:
    test_problem_free(&x);
    return failed;
}

/* The extra memory's scaling law, from workspace_bytes alone (nothing is allocated): doubling T
 * multiplies the flash workspace by 2 (O(B·Hq·T), no T x T tensor) and the naive one by 4. */
static int check_workspace_growth(const StageImpl *impl, const ModelRow *row)
{
    AttnProblem p;
    memset(&p, 0, sizeof p);
    p.B = 1, p.Hq = p.Hkv = 8, p.d = p.dv = 64, p.scale = 0.125f;
    RunCtx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.sram_bytes = FLASHLAB_DEFAULT_SRAM_BYTES;
    ctx.threads = 2;
    p.Tq = p.Tk = 4096;
    const size_t at_t = impl->workspace_bytes ? impl->workspace_bytes(&p, &ctx, DIR_BWD) : 0;
    p.Tq = p.Tk = 8192;
    const size_t at_2t = impl->workspace_bytes ? impl->workspace_bytes(&p, &ctx, DIR_BWD) : 0;
    const size_t factor = row->workspace_power == 1 ? 2 : 4;
    const int failed = at_t == 0 || at_2t != factor * at_t;
    printf("stage 06 %-4s %-5s extra memory at T = 4096: %zu bytes, at T = 8192: %zu bytes "
           "(want x%zu)  %s\n",
           device_name(row->device), row->variant[0] ? row->variant : "flash", at_t, at_2t, factor,
           failed ? "FAIL" : "ok");
    return failed;
}

/* Every shape (and, for SRAM-based rows, every M) of one row; returns the number of failed runs. */
static int check_row(const ModelRow *row, int *runs)
{
    const StageImpl *impl = stage_find("06", row->device, row->variant);
    if (!impl) {
        fprintf(stderr, "stage 06 has no %s implementation '%s' in this build\n",
                device_name(row->device), row->variant);
        ++*runs;
        return 1;
    }
    int failures = 0;
    for (int m = 0; m < (row->uses_sram ? SRAM_COUNT : 1); m++)
        for (int i = 0; i < SHAPE_COUNT; i++, ++*runs)
            failures += check_shape(impl, row, &shapes[i], row->uses_sram ? sram_sizes[m] : 0);
    failures += check_workspace_growth(impl, row);
    ++*runs;
    return failures;
}

int main(int argc, char **argv)
{
    Device device;
    const int status = hbm_driver_args(argc, argv, "06", &device);
    if (status >= 0)
        return status;
    int failures = 0, runs = 0;
    for (int r = 0; r < MODEL_COUNT; r++)
        if (models[r].device == device)
            failures += check_row(&models[r], &runs);
    if (runs == 0) {
        printf("no %s closed form in this test yet: skipped\n", argv[1]);
        return 77;
    }
    printf("%d of %d runs failed\n", failures, runs);
    return failures ? 1 : 0;
}
