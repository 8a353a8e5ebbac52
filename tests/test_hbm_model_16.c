/* test_hbm_model_16.c — stage 16 (stage 11's paged split-KV decode in bf16 on the tensor-core
 * track): the HBM counters and the workspace equal the closed form of docs/hbm_model.md ("Stage
 * 16"), byte for byte, for forced split counts 1, 2 and 5, on paged caches (ragged lengths
 * including 1, page sizes 1, 5 and 16, pages in a shuffled order, unused slots NaN) and on a
 * contiguous one, with GQA groups up to 8 (32 packed rows: two MMA tiles), Tq = 1, 3 and 4, causal,
 * a window with sink tokens and learned sinks; and o and lse are within the bf16 tolerance of a
 * float64 reference computed per sequence on its gathered keys, for those split counts and the
 * stage's own choice.
 *
 * Usage: test_hbm_model_16 cpu|cuda (77 without a CUDA device, or in a build without stage 16's
 * kernel). The expected bytes are computed here
 * from the doc's rule, not from the stage's code: the keys a query block walks are found by brute
 * force (every key some position between the block's lowest and furthest row sees,
 * docs/conventions.md through test_key_visible), numbered in order, cut into chunks of
 * ceil(count / splits) and tiles of 32 keys; a tile of a paged cache reads the table entry of each
 * distinct page it touches. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "check.h"
#include "hbm.h"
#include "hbm_model_driver.h"
#include "random.h"
#include "runner.h"
#include "test_support.h"

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
static const int forced_splits[] = {1, 2, 5};

static int seq_len(const TestPaged *x, int b) { return x->p.page_size > 0 ? x->lens[b] : x->p.Tk; }

/* ---- docs/hbm_model.md, stage 16, written out again ---------------------------------------- */

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* The keys the query block of packed rows [r0, r0 + rows) walks, in order, into keys (count
 * returned): every key some position between its lowest and furthest row sees. A block that
 * straddles two heads covers every position 0 .. Tq - 1. */
static int block_keys(const TestPaged *x, int b, int r0, int rows, int *keys)
{
    const AttnProblem *p = &x->p;
    AttnProblem sub = *p;
    sub.B = 1, sub.Tk = seq_len(x, b), sub.page_size = 0;
    const int first = r0 % p->Tq, straddles = first + rows > p->Tq;
    const int low = straddles ? 0 : first, far = straddles ? p->Tq - 1 : first + rows - 1;
    int n = 0;
    for (int j = 0; j < sub.Tk; j++)
        for (int pos = low; pos <= far; pos++)
            if (test_key_visible(&sub, pos, j)) {
                keys[n++] = j;
                break;
            }
    return n;
}

/* Bytes of the block-table entries a tile of keys (ascending) reads: one per distinct page. */
static uint64_t table_bytes(const TestPaged *x, const int *keys, int n)
{
    if (x->p.page_size == 0)
        return 0;
    uint64_t pages = 0;
    for (int i = 0; i < n; i++)
        pages += i == 0 || keys[i] / x->p.page_size != keys[i - 1] / x->p.page_size;
    return 4 * pages;
}

/* The closed form, with query blocks of Br = 16 packed rows (32 when the R = group Tq packed rows
 * of a kv head are more than 16), tiles of Bc = 32 keys and `splits` splits: per (sequence, kv
 * head, query block, split) with `rows` rows:
 *   read    = 2 rows d (Q16) + [paged] 4 (seq_lens[b])
 *           + per tile of n keys of the split's chunk: 2 n (d + dv) (K16, V16) + [paged] 4 (distinct pages)
 *   written = 4 rows (dv + 1)                      (its partial, or o and lse with one split)
 * and with splits > 1 the combine: read 4 splits N (dv + 1), written 4 N (dv + 1), N = B Hq Tq,
 * which is also the workspace. Every kv head of a sequence walks the same keys. */
static HbmCounts model(const TestPaged *x, int splits)
{
    const AttnProblem *p = &x->p;
    const uint64_t R = (uint64_t)(p->Hq / p->Hkv) * p->Tq, d = p->d, dv = p->dv, Bc = 32;
    const uint64_t Br = R <= 16 ? 16 : 32;
    const uint64_t N = (uint64_t)p->B * p->Hq * p->Tq, index = p->page_size > 0 ? 4 : 0;
    HbmCounts e = {0, 0, 0};
    int *keys = malloc(sizeof(int) * (size_t)(p->Tk + 1));
    for (int b = 0; keys && b < p->B; b++)
        for (uint64_t r0 = 0; r0 < R; r0 += Br) {
            const uint64_t rows = min_u64(Br, R - r0);
            const int count = block_keys(x, b, (int)r0, (int)rows, keys);
            const int chunk = (count + splits - 1) / splits;
            for (int s = 0; s < splits; s++) {
                const int first = s * chunk < count ? s * chunk : count;
                const int end = first + chunk < count ? first + chunk : count;
                uint64_t read = 2 * rows * d + index;
                for (int t0 = first; t0 < end; t0 += (int)Bc) {
                    const int n = (int)min_u64(Bc, (uint64_t)(end - t0));
                    read += 2 * (uint64_t)n * (d + dv) + table_bytes(x, keys + t0, n);
                }
                e.read += read * p->Hkv;
                e.written += 4 * rows * (dv + 1) * p->Hkv;
            }
        }
    free(keys);
    if (splits > 1) {
        e.read += 4 * (uint64_t)splits * N * (dv + 1);
        e.written += 4 * N * (dv + 1);
        e.workspace = 4 * (uint64_t)splits * N * (dv + 1);
    }
    return e;
}

/* One counted run with `splits` (0: the stage's own choice); returns the failed checks. */
static int check_run(const StageImpl *impl, TestPaged *x, int shape, int splits)
{
    RunCtx opts = {0};
    opts.threads = 2, opts.splits = splits;
    RunStats stats;
    FlError err = {{0}};
    AttnTensors t = {x->o, x->lse, NULL, NULL, NULL, NULL};
    for (size_t i = 0; i < (size_t)x->p.B * x->p.Hq * x->p.Tq; i++)
        x->lse[i] = NAN; /* poisoned again: each run must write everything */
    if (runner_run(impl, DIR_FWD, &x->p, &t, &opts, &stats, &err) != FL_OK) {
        fprintf(stderr, "shape %d splits %d: %s\n", shape, splits, err.msg);
        return 1;
    }
    int failures = 0;
    /* per sequence on its gathered keys (test_support_paged.c); the runner rounded the inputs to
     * bf16, the reference did not: the bf16 tolerance covers both */
    const double e = ref_attention_max_error(&x->p, x->o, x->lse, ERR_ABS_REL);
    if (!(e <= check_tolerance(PRECISION_BF16, 0))) {
        fprintf(stderr, "shape %d splits %d: o/lse error %.3g\n", shape, splits, e);
        failures++;
    }
    if (splits == 0)
        return failures;
    const HbmCounts want = model(x, splits);
    const HbmCounts got = {stats.fwd.bytes_read, stats.fwd.bytes_written, stats.extra_bytes_fwd};
    printf("shape %d (%s, page %d) splits %d: error %.2g\n", shape, x->p.page_size ? "paged" : "contiguous",
           x->p.page_size, splits, e);
    hbm_print_counts("fwd", &got, &want);
    if (!hbm_counts_equal(&got, &want))
        failures++;
    return failures;
}

int main(int argc, char **argv)
{
    Device device;
    const int status = hbm_driver_args(argc, argv, "16", &device);
    if (status >= 0)
        return status;
    const StageImpl *impl = stage_find("16", device, "");
    if (!impl && device == DEVICE_CUDA) {
        printf("stage 16 has no cuda implementation in this build: skipped\n");
        return 77;
    }
    if (!impl) {
        fprintf(stderr, "stage 16 has no %s implementation in this build\n", device_name(device));
        return 1;
    }
    int failures = 0, runs = 0;
    for (int s = 0; s < SHAPE_COUNT; s++) {
        TestPaged x;
        if (test_paged_make(&x, &shapes[s], 1600 + (uint64_t)s) != 0) {
            fprintf(stderr, "shape %d: out of memory\n", s);
            test_paged_free(&x);
            return 1;
        }
        for (size_t k = 0; k < sizeof forced_splits / sizeof forced_splits[0]; k++, runs++)
            failures += check_run(impl, &x, s, forced_splits[k]);
        failures += check_run(impl, &x, s, 0);
        runs++;
        test_paged_free(&x);
    }
    printf("%d of %d checks failed\n", failures, runs);
    return failures ? 1 : 0;
}
