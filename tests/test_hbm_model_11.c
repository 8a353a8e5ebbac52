/* test_hbm_model_11.c — stage 11 (decoding: split-KV over a paged KV cache): the HBM counters and
 * the workspace equal the closed form of docs/hbm_model.md ("Stage 11"), byte for byte, for forced
 * split counts 1, 2 and 5, on paged caches (ragged lengths including 1, page sizes 1, 4, 7 and 16,
 * pages in a shuffled order, unused slots NaN) and on contiguous ones, with GQA, Tq = 1 and 3,
 * causal, a window with sink tokens and learned sinks; and o and lse match a float64 reference
 * computed per sequence on its gathered keys, for those split counts and the stage's own choice.
 * The CPU runs at two SRAM sizes.
 *
 * Usage: test_hbm_model_11 cpu|cuda (77 without a CUDA device). The expected bytes come from the
 * doc's rule (hbm_paged_decode_model, hbm_model_driver.c), not from the stage's code: the keys a
 * query block walks are found by brute force (every key some position between the block's lowest
 * and furthest row sees, docs/conventions.md through test_key_visible), numbered in order, cut
 * into chunks of ceil(count / splits) and tiles of Bc; a tile of a paged cache reads the table
 * entry of each distinct page it touches. */
#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "check.h"
#include "hbm_model_driver.h"

/* A GQA decode batch with ragged lengths 1 .. 1000 in pages of 16; page size 1 with MQA and
 * d != dv, no mask; the gpt-oss decode configuration scaled down (group 8, window 32, learned
 * sinks) with Tq = 3 and pages of 7; a window with sink tokens in pages of 4; a contiguous decode
 * batch; a contiguous problem of 37 queries (several query blocks, some straddling two heads). */
static const TestPagedShape shapes[] = {
    {4, 32, 8, 1, 128, 128, 16, {1, 37, 300, 1000}, 1, 0, 0, 0},
    {2, 4, 1, 1, 24, 40, 1, {5, 77}, 0, 0, 0, 0},
    {3, 16, 2, 3, 64, 64, 7, {3, 50, 200}, 1, 32, 0, 1},
    {2, 4, 2, 3, 16, 16, 4, {26, 130}, 1, 6, 3, 0},
    {2, 8, 2, 1, 64, 64, 0, {500, 500}, 1, 0, 0, 0},
    {1, 4, 2, 37, 32, 32, 0, {37}, 1, 0, 0, 0},
};
enum { SHAPE_COUNT = sizeof shapes / sizeof shapes[0] };

/* The closed form of docs/hbm_model.md, stage 11: hbm_paged_decode_model (hbm_model_driver.c) with
 * float32 inputs, 4 bytes an element. */

/* Tiles: the CPU's from M (stage 10's rule), the GPU's BR = 16 rows, BC = 32 keys. */
static void tiles(const AttnProblem *p, Device device, size_t M, uint64_t *Br, uint64_t *Bc)
{
    if (device == DEVICE_CUDA) {
        *Br = 16, *Bc = 32;
        return;
    }
    const uint64_t c = (M / 4) / (4 * (uint64_t)(p->d + p->dv));
    *Bc = c > 1 ? c : 1;
    *Br = *Bc < (uint64_t)p->d ? *Bc : (uint64_t)p->d;
}

static HbmCounts model(const TestPaged *x, const StageImpl *impl, size_t M, int splits)
{
    uint64_t Br, Bc;
    tiles(&x->p, impl->device, M, &Br, &Bc);
    return hbm_paged_decode_model(x, Br, Bc, splits, sizeof(float));
}

int main(int argc, char **argv)
{
    return hbm_paged_main("11", shapes, SHAPE_COUNT, 1100, 1, CHECK_TOL_FWD, model, argc, argv);
}
