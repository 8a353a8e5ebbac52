/* test_hbm_model_17.c — stage 17 (MLA in bf16, CPU reference and CUDA kernel): its HBM counters and
 * workspace equal the closed form of docs/hbm_model.md ("Stage 17"), on four shapes (a decode step with the
 * latent walked in several tiles, four new tokens over 8 heads, odd sizes without the mask, a
 * latent wider than 128) and with 1, 2 and 5 splits (forced with --splits; 5 leaves some rows of
 * a causal block without a key in a split). The golden cases check y itself.
 *
 * Usage: test_hbm_model_17 cpu|cuda (cuda: 77 without a device or without the sm_90a kernel). The
 * closed form is written out here again from the doc, independently of the stage code: bf16
 * elements are 2 bytes, y and the splits' partials 4. The CUDA step differs in two terms: cuBLAS
 * leaves c_q W_qr in float32 and a kernel of its own turns it (RoPE) and rounds it, and its scratch
 * is bf16 slices without copies of the inputs, which the runner makes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "kind_mla.h"
#include "runner.h"
#include "test_support.h"

static const TestMlaShape shapes[] = {
    {2, 1, 200, 24, 16, 4, 16, 32, 8, 16, 1},  /* a decode step over four tiles of 64 keys */
    {1, 4, 150, 32, 16, 8, 8, 24, 4, 12, 1},   /* four new tokens, 8 heads: 32 stacked rows */
    {3, 5, 29, 21, 11, 5, 7, 19, 2, 9, 0},     /* odd sizes, no mask */
    {1, 2, 90, 16, 16, 20, 16, 160, 16, 16, 1}, /* latent wider than 128, 40 rows: a short second block */
};
static const int split_counts[] = {1, 2, 5};
enum { SHAPE_COUNT = sizeof shapes / sizeof shapes[0], SPLIT_COUNTS = sizeof split_counts / sizeof split_counts[0],
       BLOCK_ROWS = 64, BF16 = 2, F32 = 4 };

typedef struct {
    uint64_t read, written, workspace; /* bytes */
} Model;

static Model model(const MlaProblem *p, uint64_t S, int cuda)
{
    const uint64_t N = (uint64_t)p->B * p->Tq, H = p->H, D = p->D, mq = p->mq, dh = p->dh, pe = p->p, m = p->m,
                   dv = p->dv, R = (uint64_t)p->Tq * H, NH = N * H;
    Model e = {0, 0, 0};
    /* the products, bf16 in and out (y out in float32) */
    e.read = BF16 * (N * D + D * mq + 2 * N * mq + mq * H * dh + mq * H * pe + H * (N * dh + m * dh) +
                     H * (N * m + m * dv) + NH * dv + H * dv * D);
    e.written = BF16 * (N * mq + NH * dh + NH * pe + NH * m + NH * dv) + F32 * N * D;
    /* the latent attention: per batch element, per block, per split: the block's query rows, and
     * the split's share of the block's keys (the shares add up to the block's keys) */
    for (uint64_t r0 = 0; r0 < R; r0 += BLOCK_ROWS) {
        const uint64_t rows = R - r0 < BLOCK_ROWS ? R - r0 : BLOCK_ROWS;
        e.read += p->B * BF16 * (S * rows + test_mla_block_keys(p, r0, rows)) * (m + pe);
    }
    if (S == 1) {
        e.written += BF16 * NH * m; /* o_lat */
    } else {
        e.written += F32 * S * NH * (m + 1) + BF16 * NH * m; /* the partials, then o_lat */
        e.read += F32 * S * NH * (m + 1);                    /* the merge */
    }
    if (cuda) { /* c_q W_qr written in float32, then read back by the RoPE kernel, which writes q_pe */
        e.read += F32 * NH * pe;
        e.written += F32 * NH * pe;
        /* a bf16 slice of n elements is n / 2 floats, rounded up, then to whole 16-float lines */
        e.workspace = F32 * (round16((N * mq + 1) / 2) + round16((NH * dh + 1) / 2) + round16((NH * pe + 1) / 2) +
                             2 * round16((NH * m + 1) / 2) + round16((NH * dv + 1) / 2) + round16(NH * pe));
        if (S > 1)
            e.workspace += F32 * (round16(S * NH * m) + round16(S * NH));
        return e;
    }
    uint64_t ws = 0;
    for (int id = 0; id < MLA_INPUT_COUNT; id++)
        ws += round16(mla_numel(p, id));
    ws += round16(N * mq) + round16(NH * dh) + round16(NH * pe) + 2 * round16(NH * m) + round16(NH * dv);
    if (S > 1)
        ws += round16(S * NH * m) + round16(S * NH);
    e.workspace = F32 * ws;
    return e;
}

static int check(const StageImpl *impl, int shape, int splits, int *checks)
{
    TestMla x;
    if (test_mla_make(&x, &shapes[shape], 1700u + (uint64_t)shape) != 0) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    float *y = malloc(mla_numel(&x.p, MLA_INPUT_COUNT) * sizeof(float));
    RunCtx opts;
    memset(&opts, 0, sizeof opts);
    opts.threads = 2, opts.splits = splits;
    RunStats stats;
    FlError err = {{0}};
    int failed = 0;
    if (!y || mla_run(impl, &x.p, y, &opts, &stats, &err) != FL_OK) {
        fprintf(stderr, "stage 17, shape %d, %d splits: %s\n", shape, splits, y ? err.msg : "out of memory");
        failed = 1;
    } else {
        const Model want = model(&x.p, (uint64_t)splits, impl->device == DEVICE_CUDA);
        const Model got = {stats.fwd.bytes_read, stats.fwd.bytes_written, stats.extra_bytes_fwd};
        failed = got.read != want.read || got.written != want.written || got.workspace != want.workspace;
        printf("shape %d, %d splits: read %llu (model %llu) written %llu (model %llu) workspace %llu (model %llu)%s\n",
               shape, splits, (unsigned long long)got.read, (unsigned long long)want.read,
               (unsigned long long)got.written, (unsigned long long)want.written, (unsigned long long)got.workspace,
               (unsigned long long)want.workspace, failed ? "  <- differs" : "");
    }
    (*checks)++;
    free(y);
    test_mla_free(&x);
    return failed;
}

int main(int argc, char **argv)
{
    const int cuda = argc == 2 && !strcmp(argv[1], "cuda");
    if (argc != 2 || (!cuda && strcmp(argv[1], "cpu") != 0)) {
        fprintf(stderr, "usage: test_hbm_model_17 cpu|cuda\n");
        return 2;
    }
    const StageImpl *impl = stage_find("17", cuda ? DEVICE_CUDA : DEVICE_CPU, "");
    if (!impl && cuda) {
        printf("stage 17's kernel is not in this build (it needs sm_90a): skipped\n");
        return 77;
    }
    if (!impl) {
        fprintf(stderr, "stage 17 (cpu) is not in this build\n");
        return 1;
    }
    if (cuda && !cuda_device_available()) {
        printf("no CUDA device: skipped (cuda: %s)\n", cuda_device_description());
        return 77;
    }
    int failed = 0, checks = 0;
    for (int s = 0; s < SHAPE_COUNT; s++)
        for (int k = 0; k < SPLIT_COUNTS; k++)
            failed += check(impl, s, split_counts[k], &checks);
    printf("%d of %d checks failed\n", failed, checks);
    return failed ? 1 : 0;
}
