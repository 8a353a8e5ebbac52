/* test_hbm_model_14.c — stage 14 (bf16 on Hopper): the HBM counters and workspace of the forward
 * and the backward pass equal the closed forms of docs/hbm_model.md ("Stage 14"), byte for
 * byte, for the CPU reference of the tensor-core arithmetic (`cpu`) and for the kernels (`cuda`,
 * skipped with 77 without a device); and the outputs and gradients are within the bf16 tolerance
 * (check.h, docs/conventions.md) of a float64 reference on the float32 inputs, so the counts come
 * from runs that really computed attention.
 *
 * Usage: test_hbm_model_14 cpu|cuda (cuda: skipped with 77 without a Hopper GPU or in a build
 * without sm_90a). Both devices share one closed form: bf16 inputs are 2 bytes an element, o, lse,
 * D, dq, dk, dv 4 bytes; the kernels' tiles (stages/14_hopper/tiles.h) are 192 query rows at d = 64
 * and 128 at d = 128, and 128 keys, in the forward; 64 query rows and 192 keys at d = 64, 128 at
 * d = 128, in the backward, where dq is read-modify-written once per 64 keys (each consumer
 * warpgroup adds its own share); the reference counts the same. The problems are stage 12's (hbm_model_tc.c). The expected numbers are
 * computed here from the doc's formulas, tile by tile, with test_keys_seen (docs/conventions.md)
 * deciding which tiles a causal walk visits; nothing is taken from the stage. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "attn.h"
#include "hbm_model_tc.h"
#include "runner.h"
#include "test_support.h"

/* The kernels' tiles (tiles.h), written out again. */
enum { FWD_KEYS = 128, BWD_ROWS = 64, WG_KEYS = 64 };

/* Query rows of a forward block: three consumer warpgroups of 64 at d = 64, two at d = 128. */
static int fwd_rows(const AttnProblem *p) { return p->d == 64 ? 192 : 128; }

/* Keys of a backward block: three consumer warpgroups of 64 at d = 64, two at d = 128. */
static int bwd_keys(const AttnProblem *p) { return p->d == 64 ? 192 : 128; }


/* ---- docs/hbm_model.md, stage 14, written out again ---------------------------------------- */

static uint64_t kv_rows_forward(const AttnProblem *p) { return tc_kv_rows_forward(p, fwd_rows(p), FWD_KEYS, 1); }

/* Query rows one query head streams past the backward's key tiles: for each key tile of `keys`
 * from j0, the rows of every query tile of 64 whose last row sees key j0. With `per_adder`, each
 * such row counts once per WG_KEYS keys of the tile (ceil(tile keys / WG_KEYS)), which is how often those rows of dq are read-modified-written. */
static uint64_t q_rows_backward(const AttnProblem *p, int keys, int per_adder)
{
    uint64_t sum = 0;
    for (int j0 = 0; j0 < p->Tk; j0 += keys) {
        const uint64_t n = min_u64((uint64_t)keys, (uint64_t)(p->Tk - j0));
        const uint64_t times = per_adder ? (n + WG_KEYS - 1) / WG_KEYS : 1;
        for (int i0 = 0; i0 < p->Tq; i0 += BWD_ROWS) {
            const uint64_t rows = min_u64(BWD_ROWS, (uint64_t)(p->Tq - i0));
            if (test_keys_seen(p, i0 + (int)rows - 1) > j0)
                sum += times * rows;
        }
    }
    return sum;
}

/* N = B Hq query heads, N_kv = B Hkv kv heads, K_f = kv_rows_forward; S = the query rows streamed
 * past the backward's key tiles and S_dq = the dq rows read-modified-written (q_rows_backward, per
 * query head): with key tiles of bwd_keys (192 at d = 64, 128 at d = 128) and dq added per 64 keys
 * (each consumer warpgroup its own share), S = q_rows(bwd_keys) and S_dq = q_rows(bwd_keys, per
 * adder). Bytes:
 *   forward   read    = N (2 Tq d + 2 K_f (d + dv))       Q16 once, K16/V16 per visited tile
 *             written = N 4 Tq (dv + 1)                   o, lse
 *   backward  read    = N 6 Tq dv                          D: dO16 (2) and o (4)
 *                     + N_kv 2 Tk (d + dv)                 K16_j, V16_j once per key tile
 *                     + N S (2 (d + dv) + 8) + N S_dq 4 d  Q16_i, dO16_i, lse_i, D_i; dq_i read
 *             written = N 4 Tq + N 4 Tq d                  D; dq = 0
 *                     + N S_dq 4 d + N_kv 4 Tk (d + dv)    dq_i written; dK_j, dV_j once
 *   workspace: forward 0 on the CPU, 4 on the GPU (the persistent grid's work counter);
 *              backward 4 N Tq (D) */
static HbmPassCounts model_with(const AttnProblem *p, uint64_t S, uint64_t Sdq, uint64_t fwd_workspace)
{
    const uint64_t N = (uint64_t)p->B * p->Hq, Nkv = (uint64_t)p->B * p->Hkv;
    const uint64_t Tq = p->Tq, Tk = p->Tk, d = p->d, dv = p->dv;
    const uint64_t Kf = kv_rows_forward(p);
    HbmPassCounts e;
    e.fwd.read = N * (2 * Tq * d + 2 * Kf * (d + dv));
    e.fwd.written = N * 4 * Tq * (dv + 1);
    e.fwd.workspace = fwd_workspace;
    e.bwd.read = N * 6 * Tq * dv + Nkv * 2 * Tk * (d + dv) + N * S * (2 * (d + dv) + 8) + N * Sdq * 4 * d;
    e.bwd.written = N * 4 * Tq + N * 4 * Tq * d + N * Sdq * 4 * d + Nkv * 4 * Tk * (d + dv);
    e.bwd.workspace = N * 4 * Tq;
    return e;
}

static HbmPassCounts model_cpu(const AttnProblem *p, size_t M)
{
    (void)M;
    return model_with(p, q_rows_backward(p, bwd_keys(p), 0), q_rows_backward(p, bwd_keys(p), 1), 0);
}

static HbmPassCounts model_cuda(const AttnProblem *p, size_t M)
{
    (void)M;
    return model_with(p, q_rows_backward(p, bwd_keys(p), 0), q_rows_backward(p, bwd_keys(p), 1), sizeof(int));
}

static const HbmModelRow models[] = {
    {DEVICE_CPU, "", model_cpu, 0, 0, NULL},
    {DEVICE_CUDA, "", model_cuda, 0, 0, NULL},
};
enum { MODEL_COUNT = sizeof models / sizeof models[0] };

/* K_f and S of this stage's walk, for the report. */
static void walk(const AttnProblem *p, uint64_t *kf, uint64_t *s)
{
    *kf = kv_rows_forward(p);
    *s = q_rows_backward(p, bwd_keys(p), 0);
}

static int check_shape(const StageImpl *impl, const HbmModelRow *row, int shape, size_t M)
{
    return tc_check_shape("14", walk, 1400u, impl, row, shape, M);
}

int main(int argc, char **argv)
{
    const HbmDriver drv = {"14", models, MODEL_COUNT, TC_SHAPE_COUNT, check_shape, NULL};
    return hbm_driver_main_one_arch(&drv, argc, argv);
}
