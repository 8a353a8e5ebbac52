/* test_hbm_model_18.c — stage 18 (stage 14's Hopper kernels with stage 15's sliding window, sink
 * tokens and learned sinks): the HBM counters and workspace of the forward and the backward pass
 * equal the closed form of docs/hbm_model.md ("Stage 18"), byte for byte, and the outputs and
 * gradients, dsinks included, are within the bf16 tolerance (check.h, docs/conventions.md) of the
 * float64 reference, so the counts come from runs that really computed attention. On a problem
 * whose window reaches past every key (W >= Tk, no sink tokens, no sinks) the mask is the causal
 * one, and stage 14, run on it too, must count the same bytes but for the dq shares stage 18 skips.
 *
 * Usage: test_hbm_model_18 cpu|cuda (cuda: the kernels, skipped with 77 without a device, in a build
 * without sm_90a or on a GPU that is not Hopper). Both devices are held to the same closed form.
 *
 * Tiles (stages/18_hopper_window_sinks/tiles.h): forward blocks of 192 query rows at d = 64 and
 * 128 at d = 128, cut from each head's last row back, and K/V tiles of 64 keys (stage 14: 128);
 * backward key blocks of 192 keys at d = 64 and 128 at d = 128, in shares of 64 keys (one consumer
 * warpgroup each), and query tiles of 64 rows; rows of one query head. Which tiles are visited is
 * derived here key by key from test_key_visible (docs/conventions.md), not from tiles.h:
 *   forward:  a block loads a key tile when some row of the block sees some key of it;
 *   backward: a key block is loaded when some row of the head sees some key of it, a query tile
 *             visits it under the same rule for the tile's rows, and a share of it adds to (reads
 *             and writes) the tile's dq under the same rule for the share's keys. */
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
 *   gpt-oss-like: group 8, T = 300, W = 64, learned sinks (blocks of 192 from the end: 108 and 192);
 *   W = 40 >= T = 37, GQA 2, no sinks: stage 14's causal counters, equal (one share per key block);
 *   MQA 2, Tq = 150 > Tk = 40, W = 16, S = 2, sinks: 110 rows of each head see no key;
 *   d = 128, Tq = 50 < Tk = 200, W = 16, S = 3, sinks: key block 0 is loaded for its sink tokens,
 *   but no row sees its share [64, 128), which is skipped;
 *   T = 1, B = 2, W = 3, S = 1, sinks;  T = 600, W = 64, S = 4, sinks (the sink tile, then the band);
 *   no mask at all, GQA 2, B = 2, T = 200 (stage 12's problem);
 *   d = 128, MQA 4, T = 130, W = 1 (each row sees itself only);
 *   T = 400, W = 100, S = 130, sinks: two sink tiles, which the band of the last blocks reaches;
 *   W = 200 >= T = 200, d = 128, GQA 2: stage 14's causal counters but for the dq shares above the
 *   diagonal that stage 18 skips;
 *   W = 232 >= T = 232, d = 64: the same, and the first block (rows 0 .. 39) loads keys 0 .. 63
 *   where stage 14's 128-key tile loads 0 .. 127. */
static const TcSwaShape shapes[] = {
    {{1, 8, 300, 300, 64, 64}, 1, 1, 64, 0, 1},     {{1, 4, 37, 37, 64, 64}, 2, 1, 40, 0, 0},
    {{1, 2, 150, 40, 64, 64}, 1, 1, 16, 2, 1},      {{1, 2, 50, 200, 128, 128}, 1, 1, 16, 3, 1},
    {{2, 2, 1, 1, 64, 64}, 1, 1, 3, 1, 1},          {{1, 1, 600, 600, 64, 64}, 1, 1, 64, 4, 1},
    {{2, 4, 200, 200, 64, 64}, 2, 0, 0, 0, 0},      {{1, 4, 130, 130, 128, 128}, 1, 1, 1, 0, 0},
    {{1, 2, 400, 400, 64, 64}, 1, 1, 100, 130, 1},  {{1, 4, 200, 200, 128, 128}, 2, 1, 200, 0, 0},
    {{1, 2, 232, 232, 64, 64}, 1, 1, 232, 0, 0},
};
enum { SHAPE_COUNT = sizeof shapes / sizeof shapes[0] };

/* The kernels' tiles (tiles.h), written out again. */
enum { FWD_KEYS = 64, BWD_ROWS = 64, SHARE_KEYS = 64 };
enum { FWD_KEYS_14 = 128 }; /* stage 14's forward tiles, for the comparison with it */

/* Query rows of a forward block: three consumer warpgroups of 64 at d = 64, two at d = 128. */
static int fwd_rows(const AttnProblem *p) { return p->d == 64 ? 192 : 128; }

/* Keys of a backward block: three consumer warpgroups of 64 at d = 64, two at d = 128. */
static int bwd_keys(const AttnProblem *p) { return p->d == 64 ? 192 : 128; }

static int min_int(int a, int b) { return a < b ? a : b; }

/* Does some row of [i0, i0 + rows) see some key of [j0, j0 + n)? (docs/conventions.md, key by key) */
static int rows_see_keys(const AttnProblem *p, int i0, int rows, int j0, int n)
{
    for (int i = i0; i < i0 + rows; i++)
        for (int j = j0; j < j0 + n; j++)
            if (test_key_visible(p, i, j))
                return 1;
    return 0;
}

/* ---- docs/hbm_model.md, stage 18, written out again ---------------------------------------- */

/* K_f: keys one query head's forward blocks load, with key tiles of `width` keys (FWD_KEYS).
 * The blocks are [e - 192 or 128, e) ∩ [0, Tq) for e = Tq, Tq - B_r, ... > 0; each loads every key
 * tile (min(width, Tk - j0) keys) some row of the block sees. */
static uint64_t kv_keys_forward_tiles(const AttnProblem *p, int width)
{
    const int Br = fwd_rows(p);
    uint64_t sum = 0;
    for (int e = p->Tq; e > 0; e -= Br) {
        const int i0 = e > Br ? e - Br : 0;
        for (int j0 = 0; j0 < p->Tk; j0 += width) {
            const int n = min_int(width, p->Tk - j0);
            sum += rows_see_keys(p, i0, e - i0, j0, n) ? (uint64_t)n : 0;
        }
    }
    return sum;
}

static uint64_t kv_keys_forward(const AttnProblem *p) { return kv_keys_forward_tiles(p, FWD_KEYS); }

/* K_b: keys the backward loads per kv head, the key blocks some row of a head sees (the others
 * are only stored, as zeros). */
static uint64_t kv_keys_backward(const AttnProblem *p)
{
    uint64_t sum = 0;
    for (int j0 = 0; j0 < p->Tk; j0 += bwd_keys(p)) {
        const int n = min_int(bwd_keys(p), p->Tk - j0);
        sum += rows_see_keys(p, 0, p->Tq, j0, n) ? (uint64_t)n : 0;
    }
    return sum;
}

/* The query rows one query head's backward counts, summed over its key blocks and the query tiles
 * of 64 rows:
 *   per_share 0: S, the rows of each query tile holding a row that sees a key of the block (Q16_i,
 *                dO16_i, lse_i, D_i are read once per such pair);
 *   per_share 1: S_dq, for each share of 64 keys of the block, the rows of each query tile holding
 *                a row that sees a key of the share (one read-modify-write of dq_i each). */
static uint64_t q_rows_backward(const AttnProblem *p, int per_share)
{
    const int Bc = bwd_keys(p), step = per_share ? SHARE_KEYS : Bc;
    uint64_t sum = 0;
    for (int j0 = 0; j0 < p->Tk; j0 += Bc)
        for (int c0 = j0; c0 < min_int(j0 + Bc, p->Tk); c0 += step) {
            const int n = min_int(step, min_int(j0 + Bc, p->Tk) - c0);
            for (int i0 = 0; i0 < p->Tq; i0 += BWD_ROWS) {
                const int rows = min_int(BWD_ROWS, p->Tq - i0);
                sum += rows_see_keys(p, i0, rows, c0, n) ? (uint64_t)rows : 0;
            }
        }
    return sum;
}

/* N = B Hq query heads, N_kv = B Hkv kv heads, σ = 1 with learned sinks. Bytes:
 *   forward   read    = N (2 Tq d + 2 K_f (d + dv))       Q16 once, K16/V16 per visited tile
 *             written = N 4 Tq (dv + 1)                   o, lse
 *   backward  read    = N 6 Tq dv                          D: dO16 (2) and o (4)
 *                     + σ 4 (N Tq + Hq)                    dsinks in the same pass: lse, s_h
 *                     + N_kv 2 K_b (d + dv)                K16_j, V16_j of the blocks some row sees
 *                     + N S (2 (d + dv) + 8) + N S_dq 4 d  Q16_i, dO16_i, lse_i, D_i; dq_i read
 *             written = N 4 Tq + N 4 Tq d + σ 4 Hq         D; dq = 0; dsinks
 *                     + N S_dq 4 d + N_kv 4 Tk (d + dv)    dq_i written; dK_j, dV_j of every block
 *   workspace: forward 0 on the CPU, 4 on the GPU (the persistent grid's work counter);
 *              backward 4 N Tq (D) */
static HbmPassCounts model_with(const AttnProblem *p, uint64_t fwd_workspace)
{
    const uint64_t N = (uint64_t)p->B * p->Hq, Nkv = (uint64_t)p->B * p->Hkv, Hq = (uint64_t)p->Hq;
    const uint64_t Tq = p->Tq, Tk = p->Tk, d = p->d, dv = p->dv, sig = p->sinks ? 1 : 0;
    const uint64_t Kf = kv_keys_forward(p), Kb = kv_keys_backward(p);
    const uint64_t S = q_rows_backward(p, 0), Sdq = q_rows_backward(p, 1);
    HbmPassCounts e;
    e.fwd.read = N * (2 * Tq * d + 2 * Kf * (d + dv));
    e.fwd.written = N * 4 * Tq * (dv + 1);
    e.fwd.workspace = fwd_workspace;
    e.bwd.read = N * 6 * Tq * dv + sig * 4 * (N * Tq + Hq) + Nkv * 2 * Kb * (d + dv) +
                 N * S * (2 * (d + dv) + 8) + N * Sdq * 4 * d;
    e.bwd.written = N * 4 * Tq + N * 4 * Tq * d + sig * 4 * Hq + N * Sdq * 4 * d + Nkv * 4 * Tk * (d + dv);
    e.bwd.workspace = N * 4 * Tq;
    return e;
}

static HbmPassCounts model_cpu(const AttnProblem *p, size_t M)
{
    (void)M;
    return model_with(p, 0);
}

static HbmPassCounts model_cuda(const AttnProblem *p, size_t M)
{
    (void)M;
    return model_with(p, sizeof(int));
}

static const HbmModelRow models[] = {
    {DEVICE_CPU, "", model_cpu, 0, 0, NULL},
    {DEVICE_CUDA, "", model_cuda, 0, 0, NULL},
};
enum { MODEL_COUNT = sizeof models / sizeof models[0] };

/* The dq rows stage 14 read-modify-writes and stage 18 does not, per query head, under the causal
 * mask: the shares of a visited (query tile, key block) pair none of whose keys a row of the tile
 * sees. Stage 14 adds every share of a visited pair. */
static uint64_t skipped_share_rows(const AttnProblem *p)
{
    const int Bc = bwd_keys(p);
    uint64_t sum = 0;
    for (int j0 = 0; j0 < p->Tk; j0 += Bc) {
        const int end = min_int(j0 + Bc, p->Tk);
        for (int i0 = 0; i0 < p->Tq; i0 += BWD_ROWS) {
            const int rows = min_int(BWD_ROWS, p->Tq - i0);
            if (!rows_see_keys(p, i0, rows, j0, end - j0))
                continue;
            for (int c0 = j0; c0 < end; c0 += SHARE_KEYS)
                sum += rows_see_keys(p, i0, rows, c0, min_int(SHARE_KEYS, end - c0)) ? 0 : (uint64_t)rows;
        }
    }
    return sum;
}

/* W >= Tk without sink tokens or sinks keeps exactly the causal keys: stage 14 (same device) on
 * the same problem with the window off must count the same forward bytes and workspace but for the
 * K/V of its wider key tiles (the keys its 128-key tiles load past a block's last visible key,
 * 2 · 2 d bytes each), and the same backward bytes but for the skipped dq shares, 4 d bytes read
 * and 4 d written per row of one. 0 when it does. */
static int compare_with_stage14(const HbmModelRow *row, TestProblem *x, const HbmPassCounts *got18)
{
    const StageImpl *impl14 = stage_find("14", row->device, row->variant);
    if (!impl14) {
        fprintf(stderr, "stage 14 %s missing\n", device_name(row->device));
        return 1;
    }
    const int window = x->p.window;
    x->p.window = 0; /* causal stays on */
    HbmPassCounts got14;
    const int rc = hbm_run_counted(impl14, x, 0, &got14);
    const uint64_t skipped = (uint64_t)x->p.B * x->p.Hq * skipped_share_rows(&x->p) * 4 * (uint64_t)x->p.d;
    const uint64_t wider = (uint64_t)x->p.B * x->p.Hq *
                           (kv_keys_forward_tiles(&x->p, FWD_KEYS_14) - kv_keys_forward_tiles(&x->p, FWD_KEYS)) * 4 *
                           (uint64_t)x->p.d;
    x->p.window = window;
    if (rc != 0)
        return 1;
    HbmCounts fwd18 = got18->fwd, bwd18 = got18->bwd; /* with the wider tiles' keys, the skipped shares put back */
    fwd18.read += wider;
    bwd18.read += skipped;
    bwd18.written += skipped;
    const int same = hbm_counts_equal(&fwd18, &got14.fwd) && hbm_counts_equal(&bwd18, &got14.bwd);
    printf("    W = %d >= Tk = %d: stage 14's causal counters %s (forward: %llu K/V bytes fewer; backward: %llu dq "
           "bytes each way fewer)\n", window, x->p.Tk, same ? "equal" : "DIFFER", (unsigned long long)wider,
           (unsigned long long)skipped);
    if (!same) {
        hbm_print_counts("fwd 14", &got14.fwd, &fwd18);
        hbm_print_counts("bwd 14", &got14.bwd, &bwd18);
    }
    return !same;
}

/* The closed form's terms of a problem, printed beside its result. */
static void describe(const AttnProblem *p, char *buf, size_t len)
{
    snprintf(buf, len, "K_f=%llu K_b=%llu S=%llu S_dq=%llu", (unsigned long long)kv_keys_forward(p),
             (unsigned long long)kv_keys_backward(p), (unsigned long long)q_rows_backward(p, 0),
             (unsigned long long)q_rows_backward(p, 1));
}

static int check_shape(const StageImpl *impl, const HbmModelRow *row, int shape, size_t M)
{
    static const TcSwaTest test = {"18", describe, compare_with_stage14};
    return tc_swa_check_shape(&test, &shapes[shape], 1800u + (uint64_t)shape * 17u, impl, row, M);
}

int main(int argc, char **argv)
{
    const HbmDriver drv = {"18", models, MODEL_COUNT, SHAPE_COUNT, check_shape, NULL};
    return hbm_driver_main_one_arch(&drv, argc, argv);
}
