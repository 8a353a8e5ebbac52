/* test_hbm_model_08.c — stage 08 (GQA): the HBM counters and workspace of the forward and the
 * backward pass equal the closed forms of docs/hbm_model.md ("Stage 08 — GQA"), byte for byte, on
 * grouped-query shapes (group 1, 2, 3, 8, MQA, a decode step), causal on and off, and the outputs
 * and gradients match a float64 reference, so the counts come from a run that really computed
 * them. Then the GQA law of the forward: the K/V bytes of a kv head are loaded once per block of
 * its R = group * Tq packed rows, so when R fits in one query tile they are exactly
 * B Hkv Tk (d + dv) 4 bytes, 1/group of the same problem with K/V repeated to Hq heads (run both).
 *
 * Usage: test_hbm_model_08 cpu|cuda. Each implementation is one row of `models` (device, variant,
 * closed form); the cuda mode returns 77 without a CUDA device. The expected numbers are computed
 * here from the doc's formulas (written out again below, per packed tile), not taken from the
 * stage: which rows see which keys comes from test_keys_seen (docs/conventions.md), row by row. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "hbm.h"
#include "hbm_model_driver.h"
#include "runner.h"
#include "test_support.h"

/* One problem: a shape (H = Hq), its kv heads and the mask. */
typedef struct {
    TestShape s;
    int Hkv;
    int causal;
} GqaShape;

/* group 1 (Hkv = Hq) odd T; group 2 with Tq = 37, whose packed tiles straddle two heads at the
 * small M (CPU forward Br = 21, backward Br = 16); group 3 with Tq < Tk, dv != d, B > 1; MQA
 * group 3 with Tq > Tk (113 rows of each head see no key), d = 80; MQA group 8, causal on and off;
 * group 8 with d = 37; group 3 with Tq = 100 (CUDA tiles of 128 and 64 rows straddle heads) and
 * Tq > Tk; group 3 with Tq > Tk by 200 (whole tiles see nothing); T = 1 with group 2; group 2,
 * d = 128, partial last tiles; group 3 without the mask, Tq < Tk; the decode step of the issue
 * (Hq 32, Hkv 8, Tq 1, Tk 300, d 128), causal and not; an MQA decode step (group 16). */
static const GqaShape shapes[] = {
    {{1, 2, 37, 37, 24, 24}, 2, 1},     {{1, 4, 37, 37, 24, 24}, 2, 1},
    {{1, 4, 37, 37, 24, 24}, 2, 0},     {{2, 6, 50, 129, 64, 32}, 2, 1},
    {{1, 3, 130, 17, 80, 80}, 1, 1},    {{1, 8, 33, 33, 32, 32}, 1, 1},
    {{1, 8, 33, 33, 32, 32}, 1, 0},     {{1, 8, 45, 70, 37, 37}, 1, 1},
    {{1, 3, 100, 90, 64, 64}, 1, 1},    {{1, 6, 300, 100, 32, 32}, 2, 1},
    {{1, 4, 1, 1, 16, 16}, 2, 1},       {{1, 6, 200, 150, 128, 128}, 3, 1},
    {{1, 6, 50, 129, 64, 64}, 2, 0},    {{1, 32, 1, 300, 128, 128}, 8, 1},
    {{1, 32, 1, 300, 128, 128}, 8, 0},  {{1, 16, 1, 77, 64, 64}, 1, 1},
};
enum { SHAPE_COUNT = sizeof shapes / sizeof shapes[0] };

/* The CPU flash row runs at both of hbm_sram_sizes (the default M and a small one). */
typedef HbmCounts Counts;
typedef HbmPassCounts PassCounts;
typedef HbmModelRow ModelRow;

static uint64_t div_up(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* ---- docs/hbm_model.md, stage 08, written out again ---------------------------------------- */

/* Packed rows: the group = Hq / Hkv query heads of one kv head are adjacent, so its query rows form
 * one matrix of R = group Tq rows; packed row r is row r % Tq of its head and sees
 * keys_seen(r % Tq) keys (test_keys_seen: docs/conventions.md's bottom-right mask, Tk without it). */
static uint64_t packed_rows(const AttnProblem *p) { return (uint64_t)(p->Hq / p->Hkv) * p->Tq; }

static uint64_t kv_heads(const AttnProblem *p) { return (uint64_t)p->B * p->Hkv; }

static uint64_t row_keys(const AttnProblem *p, uint64_t r)
{
    return (uint64_t)test_keys_seen(p, (int)(r % (uint64_t)p->Tq));
}

/* The most keys any row of the packed tile [r0, r0 + rows) sees: the tile's K/V walk ends there.
 * Scanned row by row (a tile that straddles two heads holds the end of one and the start of the
 * next). */
static uint64_t tile_keys(const AttnProblem *p, uint64_t r0, uint64_t rows)
{
    uint64_t most = 0;
    for (uint64_t r = r0; r < r0 + rows; r++)
        most = max_u64(most, row_keys(p, r));
    return most;
}

/* Keys of K/V a query-tile-outer walk loads for one kv head: for each tile of Br packed rows, the
 * keys its furthest row sees; `chunked` rounds that up to whole chunks of Bc keys (never past Tk),
 * as the CUDA kernels do, which load whole tiles. */
static uint64_t kv_keys_loaded(const AttnProblem *p, uint64_t Br, uint64_t Bc, int chunked)
{
    const uint64_t R = packed_rows(p), Tk = p->Tk;
    uint64_t sum = 0;
    for (uint64_t r0 = 0; r0 < R; r0 += Br) {
        const uint64_t seen = tile_keys(p, r0, min_u64(Br, R - r0));
        sum += chunked ? min_u64(Tk, div_up(seen, Bc) * Bc) : seen;
    }
    return sum;
}

/* Packed rows a K/V-block-outer walk streams for one kv head: for each block of Bc keys from j0,
 * the rows of every tile of Br packed rows (over the whole group) that holds a row seeing key j0. */
static uint64_t q_rows_streamed(const AttnProblem *p, uint64_t Br, uint64_t Bc)
{
    const uint64_t R = packed_rows(p), Tk = p->Tk;
    uint64_t sum = 0;
    for (uint64_t j0 = 0; j0 < Tk; j0 += Bc)
        for (uint64_t r0 = 0; r0 < R; r0 += Br) {
            const uint64_t rows = min_u64(Br, R - r0);
            if (tile_keys(p, r0, rows) > j0)
                sum += rows;
        }
    return sum;
}

/* sum over one kv head's R packed rows of the keys each one sees (R Tk without the mask) */
static uint64_t keys_seen_total(const AttnProblem *p)
{
    uint64_t sum = 0;
    for (uint64_t r = 0; r < packed_rows(p); r++)
        sum += row_keys(p, r);
    return sum;
}

/* 08-cpu block sizes, as in stage 07 (M_f = M / 4 floats). Forward: Bc = max(1, M_f / (4 (d +
 * dv))), Br = max(1, min(Bc, d)). Backward: the same Bc, Br = min(Bc, d, (M_f / 2 - 176) /
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

/* 08-cpu FA2 forward, per kv head (floats), over its R packed rows: Q once, for each tile of Br
 * packed rows the K/V rows up to the keys its furthest row sees (exactly: the last chunk is cut
 * there), O and lse once.
 *   read = R d + K_f (d + dv),  K_f = sum over packed tiles of tile_keys
 *   written = R (dv + 1),  no workspace */
static Counts model_fwd_cpu(const AttnProblem *p, size_t M)
{
    const uint64_t N = kv_heads(p), R = packed_rows(p), d = p->d, dv = p->dv;
    const uint64_t K_f = kv_keys_loaded(p, cpu_block_r_fwd(p, M), cpu_block_c(p, M), 0);
    Counts e = {4 * N * (R * d + K_f * (d + dv)), 4 * N * R * (dv + 1), 0};
    return e;
}

/* 08-cpu flash backward, per kv head (floats), S = q_rows_streamed(Br, Bc) with the backward's Br:
 *   read    = 2 R dv                 O, dO for D
 *           + Tk (d + dv)            K_j, V_j once per kv head (not per query head)
 *           + S (2d + dv + 2)        Q_i, dO_i, lse_i, D_i, dQ_i of the packed rows streamed
 *   written = R + R d + S d + Tk (d + dv)   D; dQ = 0; dQ_i per K/V block; dK_j, dV_j once
 *   workspace = 4 B Hq Tq bytes (D) */
static PassCounts model_flash_cpu(const AttnProblem *p, size_t M)
{
    const uint64_t N = kv_heads(p), R = packed_rows(p), Tk = p->Tk, d = p->d, dv = p->dv;
    const uint64_t S = q_rows_streamed(p, cpu_block_r_bwd(p, M), cpu_block_c(p, M));
    PassCounts e;
    e.fwd = model_fwd_cpu(p, M);
    e.bwd.read = 4 * N * (2 * R * dv + Tk * (d + dv) + S * (2 * d + dv + 2));
    e.bwd.written = 4 * N * (R + R * d + S * d + Tk * (d + dv));
    e.bwd.workspace = 4 * N * R;
    return e;
}

/* 08-cpu naive: the forward is the FA2 forward above (at the default M); the backward's seven
 * whole-tensor passes, one GEMM per kv head over its R packed rows (TT = R Tk):
 *   read    = 6 TT + 2 R d + 2 Tk d + 2 R dv + Tk dv + R
 *   written = 4 TT + R d + Tk d + Tk dv
 *   workspace = 8 B Hkv R Tk = 8 B Hq Tq Tk bytes (P and dP) */
static PassCounts model_naive_cpu(const AttnProblem *p, size_t M)
{
    (void)M;
    const uint64_t N = kv_heads(p), R = packed_rows(p), Tk = p->Tk, d = p->d, dv = p->dv;
    const uint64_t TT = R * Tk;
    PassCounts e;
    e.fwd = model_fwd_cpu(p, FLASHLAB_DEFAULT_SRAM_BYTES);
    e.bwd.read = 4 * N * (6 * TT + 2 * R * d + 2 * Tk * d + 2 * R * dv + Tk * dv + R);
    e.bwd.written = 4 * N * (4 * TT + R * d + Tk * d + Tk * dv);
    e.bwd.workspace = 8 * N * TT;
    return e;
}

/* 08-cuda tiles: the forward kernel Br = 128, Bc = 64 for every d; both backward kernels
 * Br = Bc = 64; all over packed rows. The kernels load whole tiles (only the rows that exist
 * count). */
enum { CUDA_FWD_BR = 128, CUDA_FWD_BC = 64, CUDA_BWD_TILE = 64 };

/* 08-cuda FA2 forward (default and deterministic variants), per kv head (floats):
 *   read = R d + K_f (d + dv),  K_f = sum over packed tiles of 128 rows of
 *          min(Tk, ceil(tile_keys / 64) 64): the K/V tiles up to the one holding the last key the
 *          tile's furthest row sees
 *   written = R (dv + 1),  no workspace */
static Counts model_fwd_cuda(const AttnProblem *p)
{
    const uint64_t N = kv_heads(p), R = packed_rows(p), d = p->d, dv = p->dv;
    const uint64_t K_f = kv_keys_loaded(p, CUDA_FWD_BR, CUDA_FWD_BC, 1);
    Counts e = {4 * N * (R * d + K_f * (d + dv)), 4 * N * R * (dv + 1), 0};
    return e;
}

/* 08-cuda backward, dQ by atomics, S = q_rows_streamed(64, 64): each K/V tile's block walks the
 * packed query tiles of the whole group that see its first key. Per kv head (floats):
 *   read    = 2 R dv + Tk (d + dv) + S (d + dv + 2) + S d     D; K_j, V_j; Q_i, dO_i, lse_i, D_i;
 *                                                             the dQ atomics
 *   written = R + R d + Tk (d + dv) + S d                     D; dQ = 0; dK, dV; the dQ atomics
 *   workspace = 4 B Hq Tq bytes (D) */
static PassCounts model_flash_cuda(const AttnProblem *p, size_t M)
{
    (void)M;
    const uint64_t N = kv_heads(p), R = packed_rows(p), Tk = p->Tk, d = p->d, dv = p->dv;
    const uint64_t S = q_rows_streamed(p, CUDA_BWD_TILE, CUDA_BWD_TILE);
    PassCounts e;
    e.fwd = model_fwd_cuda(p);
    e.bwd.read = 4 * N * (2 * R * dv + Tk * (d + dv) + S * (d + dv + 2) + S * d);
    e.bwd.written = 4 * N * (R + R * d + Tk * (d + dv) + S * d);
    e.bwd.workspace = 4 * N * R;
    return e;
}

/* 08-cuda deterministic: the K/V-tile kernel without atomics, then one block per packed query
 * tile reading Q_i, dO_i, lse_i, D_i once and the K/V tiles up to its furthest row's last key,
 * K_d = kv_keys_loaded(64, 64, chunked), writing dQ_i once. Per kv head (floats):
 *   read    = 2 R dv + Tk (d + dv) + S (d + dv + 2) + R (d + dv + 2) + K_d (d + dv)
 *   written = R + Tk (d + dv) + R d */
static PassCounts model_deterministic_cuda(const AttnProblem *p, size_t M)
{
    (void)M;
    const uint64_t N = kv_heads(p), R = packed_rows(p), Tk = p->Tk, d = p->d, dv = p->dv;
    const uint64_t S = q_rows_streamed(p, CUDA_BWD_TILE, CUDA_BWD_TILE);
    const uint64_t K_d = kv_keys_loaded(p, CUDA_BWD_TILE, CUDA_BWD_TILE, 1);
    PassCounts e;
    e.fwd = model_fwd_cuda(p);
    e.bwd.read = 4 * N * (2 * R * dv + Tk * (d + dv) + S * (d + dv + 2) + R * (d + dv + 2) +
                          K_d * (d + dv));
    e.bwd.written = 4 * N * (R + Tk * (d + dv) + R * d);
    e.bwd.workspace = 4 * N * R;
    return e;
}

/* 08-cuda naive (cuBLAS), one batched GEMM entry per kv head over its R packed rows: TT = R Tk and
 * KS = keys_seen_total per kv head. The GEMMs compute all of S; the softmax and P kernels read only
 * the scores a row sees.
 * Forward: S = scale Q K^T; softmax kernel (3 passes over the seen scores; writes P and lse);
 * O = P V:
 *   read    = R d + Tk d + 3 KS + TT + Tk dv
 *   written = TT + R (Tk + 1) + R dv,   workspace = 4 B Hq Tq Tk bytes (S, then P)
 * Backward: S; P = exp(S - lse); dV = P^T dO; dP = dO V^T; dS (two passes over P and dP);
 * dQ = scale dS K; dK = scale dS^T Q:
 *   read    = 7 TT + KS + R + 2 R d + 2 Tk d + 2 R dv + Tk dv
 *   written = 4 TT + R d + Tk d + Tk dv,  workspace = 8 B Hq Tq Tk bytes (P and dP) */
static PassCounts model_naive_cuda(const AttnProblem *p, size_t M)
{
    (void)M;
    const uint64_t N = kv_heads(p), R = packed_rows(p), Tk = p->Tk, d = p->d, dv = p->dv;
    const uint64_t TT = R * Tk, KS = keys_seen_total(p);
    PassCounts e;
    e.fwd.read = 4 * N * (R * d + Tk * d + 3 * KS + TT + Tk * dv);
    e.fwd.written = 4 * N * (TT + R * (Tk + 1) + R * dv);
    e.fwd.workspace = 4 * N * TT;
    e.bwd.read = 4 * N * (7 * TT + KS + R + 2 * R * d + 2 * Tk * d + 2 * R * dv + Tk * dv);
    e.bwd.written = 4 * N * (4 * TT + R * d + Tk * d + Tk * dv);
    e.bwd.workspace = 8 * N * TT;
    return e;
}

static uint64_t cuda_fwd_br(const AttnProblem *p, size_t M)
{
    (void)p, (void)M;
    return CUDA_FWD_BR;
}

static uint64_t cpu_fwd_br_default(const AttnProblem *p, size_t M)
{
    (void)M;
    return cpu_block_r_fwd(p, FLASHLAB_DEFAULT_SRAM_BYTES);
}

/* One implementation and its closed form (M is 0 for rows with uses_sram = 0). fwd_br: the query
 * tile of its FA2 forward for the GQA law (a function of the problem and M; NULL for the cuBLAS
 * forward, whose K/V reads are one GEMM operand per kv head but whose reads also hold S and P). */
static const ModelRow models[] = {
    {DEVICE_CPU, "", model_flash_cpu, 1, .fwd_br = cpu_block_r_fwd},
    {DEVICE_CPU, "naive", model_naive_cpu, 0, .fwd_br = cpu_fwd_br_default},
    {DEVICE_CUDA, "", model_flash_cuda, 0, .fwd_br = cuda_fwd_br},
    {DEVICE_CUDA, "deterministic", model_deterministic_cuda, 0, .fwd_br = cuda_fwd_br},
    {DEVICE_CUDA, "naive", model_naive_cuda, 0, .fwd_br = NULL},
};
enum { MODEL_COUNT = sizeof models / sizeof models[0] };

/* The problem of shape g (Hkv = hkv: g->Hkv, or Hq for the repeated-K/V twin). */
static int make_problem(TestProblem *x, const GqaShape *g, int hkv, uint64_t seed)
{
    const TestFeatures feat = {hkv, g->causal};
    if (test_problem_make_with(x, &g->s, &feat, seed) != 0 ||
        test_problem_add_backward(x, seed + 1) != 0) {
        fprintf(stderr, "out of memory\n");
        return -1;
    }
    return 0;
}

static uint64_t shape_seed(const GqaShape *g)
{
    return 808u + (uint64_t)g->s.Tq * 7u + (uint64_t)g->s.Tk * 3u + (uint64_t)g->s.H * 11u +
           (uint64_t)g->Hkv * 13u + (uint64_t)g->causal;
}

/* The forward's K/V bytes: its read bytes less Q, read once (4 B Hq Tq d). */
static uint64_t kv_fwd_bytes(const AttnProblem *p, const Counts *fwd)
{
    return fwd->read - 4ull * p->B * p->Hq * p->Tq * p->d;
}

/* One row on one shape; 0 when both passes' counts and the outputs are right, and, for a row with
 * an FA2 forward, when the GQA law holds: with R <= the forward's query tile the K/V bytes are
 * exactly B Hkv Tk (d + dv) 4, and they are 1/group of the same problem with K/V repeated to Hq
 * heads (that twin is run too, counts and outputs checked the same way). */
static int check_shape(const StageImpl *impl, const ModelRow *row, int shape, size_t M)
{
    const GqaShape *g = &shapes[shape];
    TestProblem x, rep;
    memset(&rep, 0, sizeof rep);
    int failed = 1;
    const uint64_t seed = shape_seed(g);
    if (make_problem(&x, g, g->Hkv, seed) != 0)
        goto done;
    PassCounts got, want;
    if (hbm_run_model(impl, row, &x, M, &got, &want) != 0)
        goto done;
    const double err_fwd = ref_attention_max_error(&x.p, x.o, x.lse, ERR_ABS_REL);
    const double err_bwd = ref_gradients_max_error(&x.p, x.dq, x.dk, x.dv, ERR_ABS_REL);
    /* docs/conventions.md: atol = rtol = 1e-4 for o and lse, 5e-4 for the gradients */
    const int counts_ok = hbm_counts_equal(&got.fwd, &want.fwd) && hbm_counts_equal(&got.bwd, &want.bwd);
    failed = !counts_ok || !(err_fwd <= 1e-4) || !(err_bwd <= 5e-4);
    const AttnProblem *p = &x.p;
    const int group = p->Hq / p->Hkv;
    char sram[24]; /* M, for the rows that use it */
    hbm_sram_label(row, M, sram);
    printf("stage 08 %-4s %-13s %-6s M=%-7s B=%d Hq=%d Hkv=%d (group %d) Tq=%d Tk=%d d=%d dv=%d"
           "  R=%llu  err o/lse %.1e  grads %.1e  %s\n",
           device_name(row->device), hbm_row_name(row), g->causal ? "causal" : "full", sram, p->B,
           p->Hq, p->Hkv, group, p->Tq, p->Tk, p->d, p->dv, (unsigned long long)packed_rows(p),
           err_fwd, err_bwd, failed ? "FAIL" : "ok");
    hbm_print_counts("fwd", &got.fwd, &want.fwd);
    hbm_print_counts("bwd", &got.bwd, &want.bwd);

    if (!row->fwd_br)
        goto done;
    /* ---- the GQA law of the forward ---- */
    const uint64_t br = row->fwd_br(p, M), R = packed_rows(p);
    const uint64_t kv = kv_fwd_bytes(p, &got.fwd);
    const uint64_t kv_once = 4ull * p->B * p->Hkv * p->Tk * (p->d + p->dv);
    if (R <= br) {
        const int ok = kv == kv_once;
        failed |= !ok;
        printf("    GQA law: R = %llu <= Br = %llu: fwd K/V bytes %llu, B Hkv Tk (d + dv) 4 = %llu"
               "  %s\n",
               (unsigned long long)R, (unsigned long long)br, (unsigned long long)kv,
               (unsigned long long)kv_once, ok ? "ok" : "FAIL");
    }
    if (group == 1)
        goto done;
    /* the same problem with K/V repeated to Hq heads: kv head h takes kv head h / group of x */
    if (make_problem(&rep, g, p->Hq, seed) != 0) {
        failed = 1;
        goto done;
    }
    const size_t kd = (size_t)p->Tk * p->d, kvv = (size_t)p->Tk * p->dv;
    for (size_t b = 0; b < (size_t)p->B; b++)
        for (size_t h = 0; h < (size_t)p->Hq; h++) {
            const size_t src = test_kv_head(p, b, h), dst = b * p->Hq + h;
            memcpy(rep.k + dst * kd, x.k + src * kd, kd * sizeof(float));
            memcpy(rep.v + dst * kvv, x.v + src * kvv, kvv * sizeof(float));
        }
    PassCounts got_rep, want_rep;
    if (hbm_run_model(impl, row, &rep, M, &got_rep, &want_rep) != 0) {
        failed = 1;
        goto done;
    }
    const double err_rep = ref_attention_max_error(&rep.p, rep.o, rep.lse, ERR_ABS_REL);
    const int rep_ok = hbm_counts_equal(&got_rep.fwd, &want_rep.fwd) &&
                       hbm_counts_equal(&got_rep.bwd, &want_rep.bwd) && err_rep <= 1e-4;
    const uint64_t kv_rep = kv_fwd_bytes(&rep.p, &got_rep.fwd);
    /* R <= Br: one tile per kv head against one per query head, each loading all Tk keys (the
     * causal tile's furthest row, at position Tk - 1, sees them all): exactly 1/group. Otherwise
     * ceil(R / Br) tiles per kv head against group ceil(Tq / Br) (without the mask), never more:
     * printed, and bounded by 1/group below and 1 above. */
    const int exact = R <= br;
    const int law_ok = exact ? kv * (uint64_t)group == kv_rep
                             : kv * (uint64_t)group >= kv_rep && (g->causal || kv <= kv_rep);
    failed |= !rep_ok || !law_ok;
    printf("    GQA / repeated K/V (Hkv = Hq = %d): fwd K/V bytes %llu / %llu = %.4f, 1/group = %.4f"
           "%s  (repeated run: counts %s, err o/lse %.1e)  %s\n",
           p->Hq, (unsigned long long)kv, (unsigned long long)kv_rep, (double)kv / (double)kv_rep,
           1.0 / group, exact ? " (asserted equal)" : " (R > Br: asserted >= 1/group)",
           hbm_counts_equal(&got_rep.fwd, &want_rep.fwd) && hbm_counts_equal(&got_rep.bwd, &want_rep.bwd)
               ? "= model"
               : "differ",
           err_rep, rep_ok && law_ok ? "ok" : "FAIL");
    if (!rep_ok) {
        hbm_print_counts("fwd", &got_rep.fwd, &want_rep.fwd);
        hbm_print_counts("bwd", &got_rep.bwd, &want_rep.bwd);
    }
done:
    test_problem_free(&x);
    test_problem_free(&rep);
    return failed;
}

int main(int argc, char **argv)
{
    const HbmDriver drv = {"08", models, MODEL_COUNT, SHAPE_COUNT, check_shape, NULL};
    return hbm_driver_main(&drv, argc, argv);
}
