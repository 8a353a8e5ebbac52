/* test_hbm_model_16.c — stage 16 (stage 11's paged split-KV decode in bf16 on the tensor-core
 * track): the HBM counters and the workspace equal the closed form of docs/hbm_model.md ("Stage
 * 16"), byte for byte, for forced split counts 1, 2 and 5, on paged caches (ragged lengths
 * including 1, page sizes 1, 5 and 16, pages in a shuffled order, unused slots NaN) and on a
 * contiguous one, with GQA groups up to 8 (32 packed rows: two MMA tiles), Tq = 1, 3 and 4, causal,
 * a window with sink tokens and learned sinks; and o and lse are within the bf16 tolerance of a
 * float64 reference computed per sequence on its gathered keys, for those split counts and the
 * stage's own choice.
 *
 * Usage: test_hbm_model_16 cpu|cuda (77 without a CUDA device). The expected bytes come from the
 * doc's rule (hbm_paged_decode_model, hbm_model_driver.c), not from the stage's code: the keys a
 * query block walks are found by brute force (every key some position between the block's lowest
 * and furthest row sees, docs/conventions.md through test_key_visible), numbered in order, cut into
 * chunks of ceil(count / splits) and tiles of 16 keys; a tile of a paged cache reads the table
 * entry of each distinct page it touches. */
#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "check.h"
#include "hbm_model_driver.h"

/* A GQA-4 decode batch with ragged lengths 1 .. 1000 in pages of 16 at d = 128; the gpt-oss decode
 * configuration scaled down (group 8, window 32, learned sinks) with Tq = 4 (32 packed rows) in
 * pages of 5; MQA with Tq = 3 and a window with sink tokens in pages of 1; a contiguous GQA-2 decode
 * batch, non-causal. */
static const TestPagedShape shapes[] = {
    {4, 16, 4, 1, 128, 128, 16, {1, 37, 300, 1000}, 1, 0, 0, 0},
    {3, 16, 2, 4, 64, 64, 5, {4, 50, 200}, 1, 32, 0, 1},
    {2, 4, 1, 3, 64, 64, 1, {26, 130}, 1, 6, 3, 0},
    {2, 8, 4, 1, 64, 64, 0, {500, 500}, 0, 0, 0, 0},
};
enum { SHAPE_COUNT = sizeof shapes / sizeof shapes[0] };

/* The closed form of docs/hbm_model.md, stage 16: hbm_paged_decode_model (hbm_model_driver.c) with
 * bf16 inputs, 2 bytes an element, query blocks of 16 packed rows (32 when a kv head has more than
 * 16) and tiles of 16 keys, on the CPU and the GPU alike. */
static HbmCounts model(const TestPaged *x, const StageImpl *impl, size_t M, int splits)
{
    (void)impl, (void)M;
    const uint64_t R = (uint64_t)(x->p.Hq / x->p.Hkv) * x->p.Tq;
    return hbm_paged_decode_model(x, R <= 16 ? 16 : 32, 16, splits, sizeof(uint16_t));
}

int main(int argc, char **argv)
{
    return hbm_paged_main("16", shapes, SHAPE_COUNT, 1600, 0, check_tolerance(PRECISION_BF16, 0), model, argc,
                          argv);
}
