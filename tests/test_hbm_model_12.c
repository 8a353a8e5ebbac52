/* test_hbm_model_12.c — stage 12 (bf16 on tensor cores): the HBM counters and workspace of the
 * forward and the backward pass equal the closed forms of docs/hbm_model.md ("Stage 12"), byte for
 * byte, for the CPU reference of the tensor-core arithmetic (`cpu`) and for the kernels (`cuda`,
 * skipped with 77 without a device); and the outputs and gradients are within the bf16 tolerance
 * (check.h, docs/conventions.md) of a float64 reference on the float32 inputs, so the counts come
 * from runs that really computed attention.
 *
 * Usage: test_hbm_model_12 cpu|cuda. Both devices share one closed form: bf16 inputs are 2 bytes
 * an element, o, lse, D, dq, dk, dv 4 bytes; the kernels' tiles (stages/12_tensor_cores/tiles.h)
 * are 128 query rows in the forward, 64 in the backward, 64 keys. The expected numbers are
 * computed here from the doc's formulas, tile by tile, with test_keys_seen (docs/conventions.md) deciding
 * which tiles a causal walk visits; nothing is taken from the stage. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "attn.h"
#include "hbm_model_tc.h"
#include "test_support.h"

/* The kernels' tiles (tiles.h), written out again. */
enum { FWD_ROWS = 128, BWD_ROWS = 64, KEYS = 64 };

/* ---- docs/hbm_model.md, stage 12, written out again ---------------------------------------- */

static uint64_t kv_rows_forward(const AttnProblem *p) { return tc_kv_rows_forward(p, FWD_ROWS, KEYS, 0); }

/* Query rows one query head streams past the backward's key tiles: for each key tile of 64 from
 * j0, the rows of every query tile of 64 whose last row sees key j0. */
static uint64_t q_rows_backward(const AttnProblem *p)
{
    uint64_t sum = 0;
    for (int j0 = 0; j0 < p->Tk; j0 += KEYS)
        for (int i0 = 0; i0 < p->Tq; i0 += BWD_ROWS) {
            const uint64_t rows = min_u64(BWD_ROWS, (uint64_t)(p->Tq - i0));
            if (test_keys_seen(p, i0 + (int)rows - 1) > j0)
                sum += rows;
        }
    return sum;
}

/* N = B Hq query heads, N_kv = B Hkv kv heads, K_f = kv_rows_forward, S = q_rows_backward (both
 * per query head). Bytes:
 *   forward   read    = N (2 Tq d + 2 K_f (d + dv))       Q16 once, K16/V16 per visited tile
 *             written = N 4 Tq (dv + 1)                   o, lse
 *   backward  read    = N 6 Tq dv                          D: dO16 (2) and o (4)
 *                     + N_kv 2 Tk (d + dv)                 K16_j, V16_j once per key tile
 *                     + N S (2 (d + dv) + 8 + 4 d)         Q16_i, dO16_i, lse_i, D_i; dq_i read
 *             written = N 4 Tq + N 4 Tq d                  D; dq = 0
 *                     + N S 4 d + N_kv 4 Tk (d + dv)       dq_i written; dK_j, dV_j once
 *   workspace: 0 forward, 4 N Tq backward (D) */
static HbmPassCounts model_tc(const AttnProblem *p, size_t M)
{
    (void)M;
    const uint64_t N = (uint64_t)p->B * p->Hq, Nkv = (uint64_t)p->B * p->Hkv;
    const uint64_t Tq = p->Tq, Tk = p->Tk, d = p->d, dv = p->dv;
    const uint64_t Kf = kv_rows_forward(p), S = q_rows_backward(p);
    HbmPassCounts e;
    e.fwd.read = N * (2 * Tq * d + 2 * Kf * (d + dv));
    e.fwd.written = N * 4 * Tq * (dv + 1);
    e.fwd.workspace = 0;
    e.bwd.read = N * 6 * Tq * dv + Nkv * 2 * Tk * (d + dv) + N * S * (2 * (d + dv) + 8 + 4 * d);
    e.bwd.written = N * 4 * Tq + N * 4 * Tq * d + N * S * 4 * d + Nkv * 4 * Tk * (d + dv);
    e.bwd.workspace = N * 4 * Tq;
    return e;
}

static const HbmModelRow models[] = {
    {DEVICE_CPU, "", model_tc, 0, 0, NULL},
    {DEVICE_CUDA, "", model_tc, 0, 0, NULL},
};
enum { MODEL_COUNT = sizeof models / sizeof models[0] };

/* K_f and S of this stage's walk, for the report. */
static void walk(const AttnProblem *p, uint64_t *kf, uint64_t *s)
{
    *kf = kv_rows_forward(p);
    *s = q_rows_backward(p);
}

static int check_shape(const StageImpl *impl, const HbmModelRow *row, int shape, size_t M)
{
    return tc_check_shape("12", walk, 1200u, impl, row, shape, M);
}

int main(int argc, char **argv)
{
    const HbmDriver drv = {"12", models, MODEL_COUNT, TC_SHAPE_COUNT, check_shape, NULL};
    return hbm_driver_main(&drv, argc, argv);
}
