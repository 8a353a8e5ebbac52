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
#include "check.h"
#include "hbm_model_driver.h"
#include "test_support.h"

typedef struct {
    TestShape s;
    int Hkv;
    int causal;
} TcShape;

/* Head dims 64 and 128 only (the stage runs no others):
 *   odd T = 37, causal;  GQA 2 with B = 2, T = 200 (a forward block of 128 and one of 72, four
 *   backward tiles, the last short), no mask;  MQA with 4 heads, d = 128, causal Tq = 150 > Tk = 70
 *   (the first 80 rows of each head see no key: a backward tile of 64 that is never visited);
 *   GQA 2, d = 128, causal Tq = 45 < Tk = 300 (five key tiles, the last of 44 keys);  T = 1;
 *   a decode step, GQA 4, Tq = 1 over Tk = 129 keys, no mask. */
static const TcShape shapes[] = {
    {{1, 2, 37, 37, 64, 64}, 2, 1},    {{2, 4, 200, 200, 64, 64}, 2, 0},
    {{1, 4, 150, 70, 128, 128}, 1, 1}, {{1, 2, 45, 300, 128, 128}, 1, 1},
    {{1, 1, 1, 1, 64, 64}, 1, 1},      {{1, 8, 1, 129, 128, 128}, 2, 0},
};
enum { SHAPE_COUNT = sizeof shapes / sizeof shapes[0] };

/* The kernels' tiles (tiles.h), written out again. */
enum { FWD_ROWS = 128, BWD_ROWS = 64, KEYS = 64 };

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* ---- docs/hbm_model.md, stage 12, written out again ---------------------------------------- */

/* K/V rows one query head's forward blocks load: for each block of 128 rows, the key tiles of 64
 * up to the one holding the last key its last row sees (rows of one head: the last sees the
 * most), i.e. min(Tk, ceil(seen / 64) 64) rows. */
static uint64_t kv_rows_forward(const AttnProblem *p)
{
    uint64_t sum = 0;
    for (int i0 = 0; i0 < p->Tq; i0 += FWD_ROWS) {
        const int last = (int)min_u64((uint64_t)i0 + FWD_ROWS, (uint64_t)p->Tq) - 1;
        const uint64_t seen = (uint64_t)test_keys_seen(p, last);
        sum += min_u64((uint64_t)p->Tk, (seen + KEYS - 1) / KEYS * KEYS);
    }
    return sum;
}

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

/* One row on one shape: 0 when both passes' counts equal the model and the outputs are within the
 * bf16 tolerance of the float64 reference. */
static int check_shape(const StageImpl *impl, const HbmModelRow *row, int shape, size_t M)
{
    const TcShape *g = &shapes[shape];
    const TestFeatures feat = {g->Hkv, g->causal};
    const uint64_t seed = 1200u + (uint64_t)shape * 17u;
    TestProblem x;
    int failed = 1;
    if (test_problem_make_with(&x, &g->s, &feat, seed) != 0 || test_problem_add_backward(&x, seed + 1) != 0) {
        fprintf(stderr, "out of memory\n");
        goto done;
    }
    HbmPassCounts got, want;
    if (hbm_run_model(impl, row, &x, M, &got, &want) != 0)
        goto done;
    const double err_fwd = ref_attention_max_error(&x.p, x.o, x.lse, ERR_ABS_REL);
    const double err_bwd = ref_gradients_max_error(&x.p, x.dq, x.dk, x.dv, ERR_ABS_REL);
    const int counts_ok = hbm_counts_equal(&got.fwd, &want.fwd) && hbm_counts_equal(&got.bwd, &want.bwd);
    /* |out - ref| / (1 + |ref|) <= tol is the checker's rule with atol = rtol = tol */
    failed = !counts_ok || !(err_fwd <= check_tolerance(PRECISION_BF16, 0)) ||
             !(err_bwd <= check_tolerance(PRECISION_BF16, 1));
    const AttnProblem *p = &x.p;
    printf("stage 12 %-4s %-6s B=%d Hq=%d Hkv=%d Tq=%d Tk=%d d=%d dv=%d  K_f=%llu S=%llu"
           "  err o/lse %.1e  grads %.1e  %s\n",
           device_name(row->device), g->causal ? "causal" : "full", p->B, p->Hq, p->Hkv, p->Tq, p->Tk, p->d,
           p->dv, (unsigned long long)kv_rows_forward(p), (unsigned long long)q_rows_backward(p), err_fwd,
           err_bwd, failed ? "FAIL" : "ok");
    hbm_print_counts("fwd", &got.fwd, &want.fwd);
    hbm_print_counts("bwd", &got.bwd, &want.bwd);
done:
    test_problem_free(&x);
    return failed;
}

int main(int argc, char **argv)
{
    const HbmDriver drv = {"12", models, MODEL_COUNT, SHAPE_COUNT, check_shape, NULL};
    return hbm_driver_main(&drv, argc, argv);
}
