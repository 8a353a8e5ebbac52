/* test_hbm_model_07.c — stage 07 (causal): the HBM counters and workspace of the forward and the
 * backward pass equal the closed forms of docs/hbm_model.md ("Stage 07 — causal"), byte for byte,
 * with the causal mask on, and the outputs and gradients match a float64 reference, so the counts
 * come from a run that really computed them. Then the scaling law: with Tq = Tk = T the causal
 * flash implementations move about half the bytes of the same implementation with the mask off
 * (stage 07 with causal = 0 is stage 06), measured by running both.
 *
 * Usage: test_hbm_model_07 cpu|cuda. Each implementation is one row of `models` (device, variant,
 * closed form); the cuda mode returns 77 without a CUDA device. The expected numbers are computed
 * here from the doc's formulas (written out again below), not taken from the stage. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "attn.h"
#include "hbm.h"
#include "hbm_model_driver.h"
#include "runner.h"
#include "test_support.h"

/* Every shape runs with the causal mask on. Tq = Tk odd; Tq < Tk with dv != d and B > 1;
 * Tq > Tk (113 rows see no key) with d = 80; T = 1; Tq > Tk by 200 (whole query tiles of every
 * kernel see nothing); Tq < Tk by 200 (every row sees 201 keys or more); a tile-aligned square
 * (tiles end exactly on the diagonal); d = 37 with several blocks at the small M; d = 128 with
 * partial last tiles both ways. */
static const TestShape shapes[] = {
    {1, 2, 37, 37, 24, 24},     {2, 3, 50, 129, 64, 32},    {1, 1, 130, 17, 80, 80},
    {1, 1, 1, 1, 16, 16},       {1, 1, 300, 100, 32, 32},   {1, 1, 100, 300, 32, 32},
    {1, 2, 256, 256, 64, 64},   {1, 1, 70, 45, 37, 37},     {1, 2, 200, 150, 128, 128},
    {1, 1, 150, 200, 128, 128},
};
enum { SHAPE_COUNT = sizeof shapes / sizeof shapes[0] };

/* The CPU flash row runs at both of hbm_sram_sizes (the default M and a small one). */
typedef HbmCounts Counts;
typedef HbmPassCounts PassCounts;
typedef HbmModelRow ModelRow;

static uint64_t div_up(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* ---- docs/hbm_model.md, stage 07, written out again ---------------------------------------- */

/* The mask (docs/conventions.md): query row i sits at position i + Tk - Tq and sees keys j <= i + Tk - Tq,
 * i.e. keys_seen(i) = clamp(i + Tk - Tq + 1, 0, Tk) keys (test_keys_seen; Tk without the mask).
 * The first row that sees key j is max(0, j - (Tk - Tq)) (0 without the mask). */
static uint64_t keys_seen(const AttnProblem *p, uint64_t row)
{
    return (uint64_t)test_keys_seen(p, (int)row);
}

static uint64_t first_row_seeing(const AttnProblem *p, uint64_t key)
{
    const long r = (long)key - ((long)p->Tk - (long)p->Tq);
    return !p->causal || r <= 0 ? 0 : (uint64_t)r;
}

/* Keys of K/V a query-block-outer walk loads for one head: for each block of Br query rows, the
 * keys its last row sees; `chunked` rounds that up to whole chunks of Bc keys (never past Tk),
 * as the CUDA kernels do, which load whole tiles. */
static uint64_t kv_keys_loaded(const AttnProblem *p, uint64_t Br, uint64_t Bc, int chunked)
{
    const uint64_t Tq = p->Tq, Tk = p->Tk;
    uint64_t sum = 0;
    for (uint64_t i0 = 0; i0 < Tq; i0 += Br) {
        const uint64_t seen = keys_seen(p, min_u64(i0 + Br, Tq) - 1);
        sum += chunked ? min_u64(Tk, div_up(seen, Bc) * Bc) : seen;
    }
    return sum;
}

/* Query rows a K/V-block-outer walk streams for one head: for each block of Bc keys from j0, the
 * rows from the start of the Br-block holding the first row that sees key j0 to Tq. */
static uint64_t q_rows_streamed(const AttnProblem *p, uint64_t Br, uint64_t Bc)
{
    const uint64_t Tq = p->Tq, Tk = p->Tk;
    uint64_t sum = 0;
    for (uint64_t j0 = 0; j0 < Tk; j0 += Bc)
        sum += Tq - first_row_seeing(p, j0) / Br * Br;
    return sum;
}

/* sum over the query rows of the keys each one sees (Tq Tk without the mask) */
static uint64_t keys_seen_total(const AttnProblem *p)
{
    uint64_t sum = 0;
    for (uint64_t i = 0; i < (uint64_t)p->Tq; i++)
        sum += keys_seen(p, i);
    return sum;
}

/* 07-cpu block sizes (M_f = M / 4 floats). Forward: Bc = max(1, M_f / (4 (d + dv))),
 * Br = max(1, min(Bc, d)). Backward: the same Bc, Br = min(Bc, d, (M_f / 2 - 176) /
 * (2d + dv + 2 + 2 Bc)) rounded down to a multiple of 8 when >= 8, at least 1. */
static uint64_t cpu_block_c(const AttnProblem *p, size_t M)
{
    return max_u64(1, (M / 4) / (4 * (uint64_t)(p->d + p->dv)));
}

static uint64_t cpu_block_r_fwd(const AttnProblem *p, size_t M)
{
    return max_u64(1, min_u64(cpu_block_c(p, M), (uint64_t)p->d));
}

static uint64_t cpu_block_r_bwd(const AttnProblem *p, size_t M)
{
    const uint64_t M_f = M / 4, d = p->d, dv = p->dv, Bc = cpu_block_c(p, M), pad = 176;
    const uint64_t half = M_f / 2 > pad ? M_f / 2 - pad : 0;
    const uint64_t Br = min_u64(min_u64(Bc, d), half / (2 * d + dv + 2 + 2 * Bc));
    return Br >= 8 ? Br / 8 * 8 : max_u64(1, Br);
}

/* 07-cpu FA2 forward, per head (floats): Q once, for each Q block the K/V rows up to the keys its
 * last row sees (exactly: the last chunk is cut there), O and lse once.
 *   read = Tq d + K_f (d + dv),  K_f = sum over Q blocks of keys_seen(last row)
 *   written = Tq (dv + 1),  no workspace */
static Counts model_fwd_cpu(const AttnProblem *p, size_t M)
{
    const uint64_t N = (uint64_t)p->B * p->Hq, Tq = p->Tq, d = p->d, dv = p->dv;
    const uint64_t K_f = kv_keys_loaded(p, cpu_block_r_fwd(p, M), cpu_block_c(p, M), 0);
    Counts e = {4 * N * (Tq * d + K_f * (d + dv)), 4 * N * Tq * (dv + 1), 0};
    return e;
}

/* 07-cpu flash backward, per head (floats), R = q_rows_streamed(Br, Bc) with the backward's Br:
 *   read    = 2 Tq dv                O, dO for D
 *           + Tk (d + dv)            K_j, V_j once
 *           + R (2d + dv + 2)        Q_i, dO_i, lse_i, D_i, dQ_i of the rows streamed per K/V block
 *   written = Tq + Tq d + R d + Tk (d + dv)   D; dQ = 0; dQ_i per K/V block; dK_j, dV_j once
 *   workspace = 4 B Hq Tq bytes (D) */
static PassCounts model_flash_cpu(const AttnProblem *p, size_t M)
{
    const uint64_t N = (uint64_t)p->B * p->Hq, Tq = p->Tq, Tk = p->Tk, d = p->d, dv = p->dv;
    const uint64_t R = q_rows_streamed(p, cpu_block_r_bwd(p, M), cpu_block_c(p, M));
    PassCounts e;
    e.fwd = model_fwd_cpu(p, M);
    e.bwd.read = 4 * N * (2 * Tq * dv + Tk * (d + dv) + R * (2 * d + dv + 2));
    e.bwd.written = 4 * N * (Tq + Tq * d + R * d + Tk * (d + dv));
    e.bwd.workspace = 4 * N * Tq;
    return e;
}

/* 07-cpu naive: the forward is the FA2 forward above (at the default M: this row sets none); the
 * backward's seven whole-tensor passes are stage 06's, the mask only zeroes P:
 *   read    = 6 Tq Tk + 2 Tq d + 2 Tk d + 2 Tq dv + Tk dv + Tq
 *   written = 4 Tq Tk + Tq d + Tk d + Tk dv
 *   workspace = 8 B Hq Tq Tk bytes (P and dP) */
static PassCounts model_naive_cpu(const AttnProblem *p, size_t M)
{
    (void)M;
    const uint64_t N = (uint64_t)p->B * p->Hq, Tq = p->Tq, Tk = p->Tk, d = p->d, dv = p->dv;
    PassCounts e;
    e.fwd = model_fwd_cpu(p, FLASHLAB_DEFAULT_SRAM_BYTES);
    e.bwd.read = 4 * N * (6 * Tq * Tk + 2 * Tq * d + 2 * Tk * d + 2 * Tq * dv + Tk * dv + Tq);
    e.bwd.written = 4 * N * (4 * Tq * Tk + Tq * d + Tk * d + Tk * dv);
    e.bwd.workspace = 8 * N * Tq * Tk;
    return e;
}

/* 07-cuda tiles: the forward kernel Br = 128, Bc = 64 for every d; both backward kernels
 * Br = Bc = 64. The kernels load whole tiles (only the rows that exist count). */
enum { CUDA_FWD_BR = 128, CUDA_FWD_BC = 64, CUDA_BWD_TILE = 64 };

/* 07-cuda FA2 forward (default and deterministic variants), per head (floats):
 *   read = Tq d + K_f (d + dv),  K_f = sum over query tiles of min(Tk, ceil(keys_seen(last row)
 *          / 64) 64): the K/V tiles up to the one holding the last row's last key
 *   written = Tq (dv + 1),  no workspace */
static Counts model_fwd_cuda(const AttnProblem *p)
{
    const uint64_t N = (uint64_t)p->B * p->Hq, Tq = p->Tq, d = p->d, dv = p->dv;
    const uint64_t K_f = kv_keys_loaded(p, CUDA_FWD_BR, CUDA_FWD_BC, 1);
    Counts e = {4 * N * (Tq * d + K_f * (d + dv)), 4 * N * Tq * (dv + 1), 0};
    return e;
}

/* 07-cuda backward, dQ by atomics, R = q_rows_streamed(64, 64): each K/V tile's block walks the
 * query tiles from the one holding the first row that sees its first key. Per head (floats):
 *   read    = 2 Tq dv + Tk (d + dv) + R (d + dv + 2) + R d     D; K_j, V_j; Q_i, dO_i, lse_i, D_i;
 *                                                              the dQ atomics
 *   written = Tq + Tq d + Tk (d + dv) + R d                    D; dQ = 0; dK, dV; the dQ atomics
 *   workspace = 4 B Hq Tq bytes (D) */
static PassCounts model_flash_cuda(const AttnProblem *p, size_t M)
{
    (void)M;
    const uint64_t N = (uint64_t)p->B * p->Hq, Tq = p->Tq, Tk = p->Tk, d = p->d, dv = p->dv;
    const uint64_t R = q_rows_streamed(p, CUDA_BWD_TILE, CUDA_BWD_TILE);
    PassCounts e;
    e.fwd = model_fwd_cuda(p);
    e.bwd.read = 4 * N * (2 * Tq * dv + Tk * (d + dv) + R * (d + dv + 2) + R * d);
    e.bwd.written = 4 * N * (Tq + Tq * d + Tk * (d + dv) + R * d);
    e.bwd.workspace = 4 * N * Tq;
    return e;
}

/* 07-cuda deterministic: the K/V-tile kernel without atomics, then one block per query tile
 * reading Q_i, dO_i, lse_i, D_i once and the K/V tiles up to its last row's last key,
 * K_d = kv_keys_loaded(64, 64, chunked), writing dQ_i once. Per head (floats):
 *   read    = 2 Tq dv + Tk (d + dv) + R (d + dv + 2) + Tq (d + dv + 2) + K_d (d + dv)
 *   written = Tq + Tk (d + dv) + Tq d */
static PassCounts model_deterministic_cuda(const AttnProblem *p, size_t M)
{
    (void)M;
    const uint64_t N = (uint64_t)p->B * p->Hq, Tq = p->Tq, Tk = p->Tk, d = p->d, dv = p->dv;
    const uint64_t R = q_rows_streamed(p, CUDA_BWD_TILE, CUDA_BWD_TILE);
    const uint64_t K_d = kv_keys_loaded(p, CUDA_BWD_TILE, CUDA_BWD_TILE, 1);
    PassCounts e;
    e.fwd = model_fwd_cuda(p);
    e.bwd.read = 4 * N * (2 * Tq * dv + Tk * (d + dv) + R * (d + dv + 2) + Tq * (d + dv + 2) +
                          K_d * (d + dv));
    e.bwd.written = 4 * N * (Tq + Tk * (d + dv) + Tq * d);
    e.bwd.workspace = 4 * N * Tq;
    return e;
}

/* 07-cuda naive (cuBLAS): whole-tensor passes, TT = Tq Tk and KS = sum_i keys_seen(i) per head.
 * The GEMMs compute all of S; the softmax and P kernels read only the scores a row sees.
 * Forward: S = scale Q K^T; softmax kernel (3 passes over the seen scores; writes P and lse);
 * O = P V:
 *   read    = Tq d + Tk d + 3 KS + TT + Tk dv
 *   written = TT + Tq (Tk + 1) + Tq dv,   workspace = 4 B Hq TT bytes (S, then P)
 * Backward: S; P = exp(S - lse) (reads the seen scores and lse, writes the whole row); dV = P^T dO;
 * dP = dO V^T; dS (two passes over P and dP); dQ = scale dS K; dK = scale dS^T Q:
 *   read    = 7 TT + KS + Tq + 2 Tq d + 2 Tk d + 2 Tq dv + Tk dv
 *   written = 4 TT + Tq d + Tk d + Tk dv,  workspace = 8 B Hq TT bytes (P and dP) */
static PassCounts model_naive_cuda(const AttnProblem *p, size_t M)
{
    (void)M;
    const uint64_t N = (uint64_t)p->B * p->Hq, Tq = p->Tq, Tk = p->Tk, d = p->d, dv = p->dv;
    const uint64_t TT = Tq * Tk, KS = keys_seen_total(p);
    PassCounts e;
    e.fwd.read = 4 * N * (Tq * d + Tk * d + 3 * KS + TT + Tk * dv);
    e.fwd.written = 4 * N * (TT + Tq * (Tk + 1) + Tq * dv);
    e.fwd.workspace = 4 * N * TT;
    e.bwd.read = 4 * N * (7 * TT + KS + Tq + 2 * Tq * d + 2 * Tk * d + 2 * Tq * dv + Tk * dv);
    e.bwd.written = 4 * N * (4 * TT + Tq * d + Tk * d + Tk * dv);
    e.bwd.workspace = 8 * N * TT;
    return e;
}

/* One implementation and its closed form (M is 0 for rows with uses_sram = 0). flash: the row
 * skips the tiles above the diagonal, so the scaling law applies to it. */
static const ModelRow models[] = {
    {DEVICE_CPU, "", model_flash_cpu, 1, .flash = 1},
    {DEVICE_CPU, "naive", model_naive_cpu, 0, .flash = 0},
    {DEVICE_CUDA, "", model_flash_cuda, 0, .flash = 1},
    {DEVICE_CUDA, "deterministic", model_deterministic_cuda, 0, .flash = 1},
    {DEVICE_CUDA, "naive", model_naive_cuda, 0, .flash = 0},
};
enum { MODEL_COUNT = sizeof models / sizeof models[0] };

/* One row on one shape, causal on; 0 when both passes' counts and the outputs are right. */
static int check_shape(const StageImpl *impl, const ModelRow *row, int shape, size_t M)
{
    const TestShape *s = &shapes[shape];
    TestProblem x;
    const TestFeatures feat = {0, 1};
    int failed = 1;
    const uint64_t seed = 707u + (uint64_t)s->Tq * 7u + (uint64_t)s->Tk;
    if (test_problem_make_with(&x, s, &feat, seed) != 0 ||
        test_problem_add_backward(&x, seed + 1) != 0) {
        fprintf(stderr, "out of memory\n");
        goto done;
    }
    PassCounts got, want;
    if (hbm_run_model(impl, row, &x, M, &got, &want) != 0)
        goto done;
    const double err_fwd = ref_attention_max_error(&x.p, x.o, x.lse, ERR_ABS_REL);
    const double err_bwd = ref_gradients_max_error(&x.p, x.dq, x.dk, x.dv, ERR_ABS_REL);
    /* docs/conventions.md: atol = rtol = 1e-4 for o and lse, 5e-4 for the gradients */
    const int counts_ok = hbm_counts_equal(&got.fwd, &want.fwd) && hbm_counts_equal(&got.bwd, &want.bwd);
    failed = !counts_ok || !(err_fwd <= 1e-4) || !(err_bwd <= 5e-4);
    char sram[24]; /* M, for the rows that use it */
    hbm_sram_label(row, M, sram);
    printf("stage 07 %-4s %-13s causal M=%-7s B=%d H=%d Tq=%d Tk=%d d=%d dv=%d  err o/lse %.1e"
           "  grads %.1e  %s\n",
           device_name(row->device), hbm_row_name(row), sram, s->B, s->H, s->Tq, s->Tk, s->d, s->dv,
           err_fwd, err_bwd, failed ? "FAIL" : "ok");
    hbm_print_counts("fwd", &got.fwd, &want.fwd);
    hbm_print_counts("bwd", &got.bwd, &want.bwd);
done:
    test_problem_free(&x);
    return failed;
}

/* ---- the scaling law ----------------------------------------------------------------------- */

/* Tq = Tk = T, d = dv = 64, one head. T = 1024 is the size the issue names; T = 4096 is a multiple
 * of every tile (CUDA 64 and 128, CPU 64 and 8) but the CPU backward's Br = 48 at the default M,
 * with 32 to 512 tiles per side. */
static const int law_sizes[] = {1024, 4096};
enum { LAW_SIZES = sizeof law_sizes / sizeof law_sizes[0] };

/* Of the forward: the K/V bytes (the read bytes less Q, read once: 4 N Tq d). Of the backward:
 * all its bytes, read + written. */
typedef struct {
    double kv_fwd, bwd_total;
} Traffic;

/* One run at T with the mask on or off; counts checked against the model too. */
static int law_run(const StageImpl *impl, const ModelRow *row, int T, int causal, size_t M,
                   Traffic *out)
{
    const TestShape s = {1, 1, T, T, 64, 64};
    const TestFeatures feat = {0, causal};
    TestProblem x;
    int failed = 1;
    memset(out, 0, sizeof *out);
    if (test_problem_make_with(&x, &s, &feat, 77u + (uint64_t)T) != 0 ||
        test_problem_add_backward(&x, 78u + (uint64_t)T) != 0) {
        fprintf(stderr, "out of memory\n");
        goto done;
    }
    PassCounts got, want;
    if (hbm_run_model(impl, row, &x, M, &got, &want) != 0)
        goto done;
    failed = !hbm_counts_equal(&got.fwd, &want.fwd) || !hbm_counts_equal(&got.bwd, &want.bwd);
    if (failed) {
        printf("stage 07 %-4s %-13s T=%d causal=%d: counts differ from the model\n",
               device_name(row->device), hbm_row_name(row), T, causal);
        hbm_print_counts("fwd", &got.fwd, &want.fwd);
        hbm_print_counts("bwd", &got.bwd, &want.bwd);
    }
    const uint64_t q_bytes = 4ull * s.B * s.H * s.Tq * s.d;
    out->kv_fwd = (double)(got.fwd.read - q_bytes);
    out->bwd_total = (double)(got.bwd.read + got.bwd.written);
done:
    test_problem_free(&x);
    return failed;
}

/* The causal flash traffic over the same implementation's traffic with the mask off, at each
 * size. With Br = Bc = B dividing T, a head has T/B (T/B + 1) / 2 tile pairs on or below the
 * diagonal instead of (T/B)^2, so the tile traffic tends to half from above as T/B grows; the
 * O(T d) terms the mask does not touch (Q, O, lse, D, dK, dV once) add a little at small T.
 * Asserted: at T = 4096 both ratios lie in [0.45, 0.55]; and each ratio falls from T = 1024 to
 * T = 4096. The T = 1024 ratios are printed with the band beside them. */
static int check_scaling(const StageImpl *impl, const ModelRow *row, size_t M, int *runs)
{
    Traffic on[LAW_SIZES], off[LAW_SIZES];
    double kv[LAW_SIZES], bwd[LAW_SIZES];
    int failures = 0;
    char sram[24];
    hbm_sram_label(row, M, sram);
    for (int k = 0; k < LAW_SIZES; k++) {
        failures += law_run(impl, row, law_sizes[k], 1, M, &on[k]);
        failures += law_run(impl, row, law_sizes[k], 0, M, &off[k]);
        *runs += 2;
        kv[k] = on[k].kv_fwd / off[k].kv_fwd;
        bwd[k] = on[k].bwd_total / off[k].bwd_total;
    }
    for (int k = 0; k < LAW_SIZES; k++) {
        const int last = k == LAW_SIZES - 1;
        const int in_kv = kv[k] >= 0.45 && kv[k] <= 0.55, in_bwd = bwd[k] >= 0.45 && bwd[k] <= 0.55;
        const int falls = k == 0 || (kv[k] < kv[k - 1] && bwd[k] < bwd[k - 1]);
        const int failed = !falls || (last && (!in_kv || !in_bwd));
        failures += failed;
        ++*runs;
        printf("stage 07 %-4s %-13s M=%-7s T=%-5d causal / no mask: fwd K/V bytes %.0f / %.0f = "
               "%.4f%s  bwd bytes %.0f / %.0f = %.4f%s  %s\n",
               device_name(row->device), hbm_row_name(row), sram, law_sizes[k], on[k].kv_fwd,
               off[k].kv_fwd, kv[k], in_kv ? " (in [0.45, 0.55])" : " (outside [0.45, 0.55])",
               on[k].bwd_total, off[k].bwd_total, bwd[k],
               in_bwd ? " (in [0.45, 0.55])" : " (outside [0.45, 0.55])",
               failed ? "FAIL" : last ? "ok" : "ok (band asserted at the larger T)");
    }
    return failures;
}

/* After a flash row's shapes: its scaling law at every M it runs at. */
static int check_scaling_law(const StageImpl *impl, const ModelRow *row, int *runs)
{
    int failures = 0;
    for (int m = 0; row->flash && m < (row->uses_sram ? HBM_SRAM_COUNT : 1); m++)
        failures += check_scaling(impl, row, row->uses_sram ? hbm_sram_sizes[m] : 0, runs);
    return failures;
}

int main(int argc, char **argv)
{
    const HbmDriver drv = {"07", models, MODEL_COUNT, SHAPE_COUNT, check_shape, check_scaling_law};
    return hbm_driver_main(&drv, argc, argv);
}
