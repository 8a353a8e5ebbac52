/* test_hbm_model_15.c — stage 15 (bf16 sliding window, sink tokens and learned sinks on the
 * tensor-core track): the HBM counters and workspace of the forward and the backward pass equal the
 * closed form of docs/hbm_model.md ("Stage 15"), byte for byte, and the outputs and gradients,
 * dsinks included, are within the bf16 tolerance (check.h, docs/conventions.md) of the float64
 * reference, so the counts come from runs that really computed attention. On a problem whose
 * window reaches past every key (W >= Tk, no sink tokens, no sinks) the counters are stage 12's
 * causal counters, which is run on it too.
 *
 * Usage: test_hbm_model_15 cpu|cuda (cuda: the kernels, skipped with 77 without a device). Both
 * devices are held to the same closed form.
 *
 * Tiles (stage 12's, stages/15_tc_window_sinks/tiles.h): 128 query rows per forward block, 64 per
 * backward query tile, 64 keys per tile, rows of one query head. Which tiles are visited is
 * derived here key by key from test_key_visible (docs/conventions.md), not from tiles.h:
 *   forward:  a block loads a key tile when some row of the block sees some key of it;
 *   backward: a key tile is loaded when some row of the head sees some key of it, and a query
 *             tile visits it under the same rule for the tile's rows. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "attn.h"
#include "check.h"
#include "hbm_model_driver.h"
#include "hbm_model_tc.h"
#include "runner.h"
#include "test_support.h"

/* d = dv in {64, 128} (the stage runs no others):
 *   gpt-oss-like: group 8 (Hq = 8, Hkv = 1), T = 300, W = 64, learned sinks (bands skip tiles);
 *   W = 40 >= T = 37, GQA 2, no sinks: compared with stage 12's causal counters;
 *   MQA 2, Tq = 150 > Tk = 40, W = 16, S = 2, sinks: 110 rows of each head see no key;
 *   d = 128, Tq = 50 < Tk = 200, W = 16, S = 3, sinks: key tile 64 is seen by no row;
 *   T = 1, B = 2, W = 3, S = 1, sinks;  T = 600, W = 64, S = 4, sinks (sinks tile, then the band);
 *   no mask at all, GQA 2, B = 2, T = 200 (stage 12's problem);
 *   d = 128, MQA 4, T = 130, W = 1 (each row sees itself only). */
static const TcSwaShape shapes[] = {
    {{1, 8, 300, 300, 64, 64}, 1, 1, 64, 0, 1},   {{1, 4, 37, 37, 64, 64}, 2, 1, 40, 0, 0},
    {{1, 2, 150, 40, 64, 64}, 1, 1, 16, 2, 1},    {{1, 2, 50, 200, 128, 128}, 1, 1, 16, 3, 1},
    {{2, 2, 1, 1, 64, 64}, 1, 1, 3, 1, 1},        {{1, 1, 600, 600, 64, 64}, 1, 1, 64, 4, 1},
    {{2, 4, 200, 200, 64, 64}, 2, 0, 0, 0, 0},    {{1, 4, 130, 130, 128, 128}, 1, 1, 1, 0, 0},
};
enum { SHAPE_COUNT = sizeof shapes / sizeof shapes[0] };

/* The kernels' tiles (tiles.h), written out again. */
enum { FWD_ROWS = 128, BWD_ROWS = 64, KEYS = 64 };

/* Does some row of [i0, i0 + rows) see some key of [j0, j0 + n)? (docs/conventions.md, key by key) */
static int rows_see_tile(const AttnProblem *p, int i0, int rows, int j0, int n)
{
    for (int i = i0; i < i0 + rows; i++)
        for (int j = j0; j < j0 + n; j++)
            if (test_key_visible(p, i, j))
                return 1;
    return 0;
}

/* ---- docs/hbm_model.md, stage 15, written out again ---------------------------------------- */

/* K_f: keys one query head's forward blocks load, each key tile (min(64, Tk - j0) keys) some row
 * of the block sees. */
static uint64_t kv_keys_forward(const AttnProblem *p)
{
    uint64_t sum = 0;
    for (int i0 = 0; i0 < p->Tq; i0 += FWD_ROWS)
        for (int j0 = 0; j0 < p->Tk; j0 += KEYS) {
            const int n = (int)min_u64(KEYS, (uint64_t)(p->Tk - j0));
            if (rows_see_tile(p, i0, (int)min_u64(FWD_ROWS, (uint64_t)(p->Tq - i0)), j0, n))
                sum += (uint64_t)n;
        }
    return sum;
}

/* K_b: keys the backward loads per kv head, the key tiles some row of a head sees (the others
 * are only stored, as zeros). */
static uint64_t kv_keys_backward(const AttnProblem *p)
{
    uint64_t sum = 0;
    for (int j0 = 0; j0 < p->Tk; j0 += KEYS) {
        const int n = (int)min_u64(KEYS, (uint64_t)(p->Tk - j0));
        sum += rows_see_tile(p, 0, p->Tq, j0, n) ? (uint64_t)n : 0;
    }
    return sum;
}

/* S: query rows one query head streams past the backward's key tiles, for each key tile the rows
 * of every query tile of 64 with a row that sees one of its keys. */
static uint64_t q_rows_backward(const AttnProblem *p)
{
    uint64_t sum = 0;
    for (int j0 = 0; j0 < p->Tk; j0 += KEYS)
        for (int i0 = 0; i0 < p->Tq; i0 += BWD_ROWS) {
            const int rows = (int)min_u64(BWD_ROWS, (uint64_t)(p->Tq - i0));
            if (rows_see_tile(p, i0, rows, j0, (int)min_u64(KEYS, (uint64_t)(p->Tk - j0))))
                sum += (uint64_t)rows;
        }
    return sum;
}

/* N = B Hq query heads, N_kv = B Hkv kv heads, σ = 1 with learned sinks. Bytes:
 *   forward   read    = N (2 Tq d + 2 K_f (d + dv))       Q16 once, K16/V16 per visited tile
 *             written = N 4 Tq (dv + 1)                   o, lse
 *   backward  read    = N 6 Tq dv                          D: dO16 (2) and o (4)
 *                     + σ 4 (N Tq + Hq)                    dsinks in the same pass: lse, s_h
 *                     + N_kv 2 K_b (d + dv)                K16_j, V16_j of the tiles some row sees
 *                     + N S (2 (d + dv) + 8 + 4 d)         Q16_i, dO16_i, lse_i, D_i; dq_i read
 *             written = N 4 Tq + N 4 Tq d + σ 4 Hq         D; dq = 0; dsinks
 *                     + N S 4 d + N_kv 4 Tk (d + dv)       dq_i written; dK_j, dV_j of every tile
 *   workspace: 0 forward, 4 N Tq backward (D) */
static HbmPassCounts model_tc_swa(const AttnProblem *p, size_t M)
{
    (void)M;
    const uint64_t N = (uint64_t)p->B * p->Hq, Nkv = (uint64_t)p->B * p->Hkv, Hq = (uint64_t)p->Hq;
    const uint64_t Tq = p->Tq, Tk = p->Tk, d = p->d, dv = p->dv, sig = p->sinks ? 1 : 0;
    const uint64_t Kf = kv_keys_forward(p), Kb = kv_keys_backward(p), S = q_rows_backward(p);
    HbmPassCounts e;
    e.fwd.read = N * (2 * Tq * d + 2 * Kf * (d + dv));
    e.fwd.written = N * 4 * Tq * (dv + 1);
    e.fwd.workspace = 0;
    e.bwd.read = N * 6 * Tq * dv + sig * 4 * (N * Tq + Hq) + Nkv * 2 * Kb * (d + dv) +
                 N * S * (2 * (d + dv) + 8 + 4 * d);
    e.bwd.written = N * 4 * Tq + N * 4 * Tq * d + sig * 4 * Hq + N * S * 4 * d + Nkv * 4 * Tk * (d + dv);
    e.bwd.workspace = N * 4 * Tq;
    return e;
}

static const HbmModelRow models[] = {
    {DEVICE_CPU, "", model_tc_swa, 0, 0, NULL},
    {DEVICE_CUDA, "", model_tc_swa, 0, 0, NULL},
};
enum { MODEL_COUNT = sizeof models / sizeof models[0] };

/* W >= Tk without sink tokens or sinks keeps exactly the causal keys: stage 12 (same device) on
 * the same problem with the window off must count the same bytes. 0 when it does. */
static int compare_with_stage12(const HbmModelRow *row, TestProblem *x, const HbmPassCounts *got15)
{
    const StageImpl *impl12 = stage_find("12", row->device, row->variant);
    if (!impl12) {
        fprintf(stderr, "stage 12 %s missing\n", device_name(row->device));
        return 1;
    }
    const int window = x->p.window;
    x->p.window = 0; /* causal stays on */
    HbmPassCounts got12;
    const int rc = hbm_run_counted(impl12, x, 0, &got12);
    x->p.window = window;
    if (rc != 0)
        return 1;
    const int same = hbm_counts_equal(&got15->fwd, &got12.fwd) && hbm_counts_equal(&got15->bwd, &got12.bwd);
    printf("    W = %d >= Tk = %d: stage 12's causal counters %s\n", window, x->p.Tk, same ? "equal" : "DIFFER");
    if (!same) {
        hbm_print_counts("fwd 12", &got12.fwd, &got15->fwd);
        hbm_print_counts("bwd 12", &got12.bwd, &got15->bwd);
    }
    return !same;
}

/* The closed form's terms of a problem, printed beside its result. */
static void describe(const AttnProblem *p, char *buf, size_t len)
{
    snprintf(buf, len, "K_f=%llu K_b=%llu S=%llu", (unsigned long long)kv_keys_forward(p),
             (unsigned long long)kv_keys_backward(p), (unsigned long long)q_rows_backward(p));
}

static int check_shape(const StageImpl *impl, const HbmModelRow *row, int shape, size_t M)
{
    static const TcSwaTest test = {"15", describe, compare_with_stage12};
    return tc_swa_check_shape(&test, &shapes[shape], 1500u + (uint64_t)shape * 17u, impl, row, M);
}

int main(int argc, char **argv)
{
    const HbmDriver drv = {"15", models, MODEL_COUNT, SHAPE_COUNT, check_shape, NULL};
    return hbm_driver_main(&drv, argc, argv);
}
