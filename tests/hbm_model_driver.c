/* hbm_model_driver.c — the shared driver of the HBM-model tests (see hbm_model_driver.h). */
#include "hbm_model_driver.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "hbm.h"
#include "runner.h"

const size_t hbm_sram_sizes[HBM_SRAM_COUNT] = {FLASHLAB_DEFAULT_SRAM_BYTES, 16u * 1024u};

const char *hbm_variant_name(const char *variant) { return variant[0] ? variant : "flash"; }

const char *hbm_row_name(const HbmModelRow *row) { return hbm_variant_name(row->variant); }

const char *hbm_sram_label(const HbmModelRow *row, size_t M, char buf[24])
{
    strcpy(buf, "-");
    if (row->uses_sram)
        snprintf(buf, 24, "%zu", M);
    return buf;
}

int hbm_counts_equal(const HbmCounts *a, const HbmCounts *b)
{
    return a->read == b->read && a->written == b->written && a->workspace == b->workspace;
}

void hbm_print_counts(const char *pass, const HbmCounts *got, const HbmCounts *want)
{
    printf("    %s read %llu (model %llu)  written %llu (model %llu)  workspace %llu (model %llu)"
           "%s\n",
           pass, (unsigned long long)got->read, (unsigned long long)want->read,
           (unsigned long long)got->written, (unsigned long long)want->written,
           (unsigned long long)got->workspace, (unsigned long long)want->workspace,
           hbm_counts_equal(got, want) ? "" : "  <- differs");
}

int hbm_run_counted(const StageImpl *impl, TestProblem *x, size_t M, HbmPassCounts *got)
{
    AttnTensors t = test_problem_tensors(x);
    RunCtx opts;
    memset(&opts, 0, sizeof opts);
    opts.sram_bytes = M;
    opts.threads = 2;
    RunStats stats;
    FlError err = {{0}};
    const int rc = runner_run(impl, DIR_BWD, &x->p, &t, &opts, &stats, &err);
    if (rc != 0) {
        fprintf(stderr, "stage %s %s %s: runner_run failed (%d): %s\n", impl->stage,
                device_name(impl->device), hbm_variant_name(impl->variant), rc, err.msg);
        return -1;
    }
    got->fwd = (HbmCounts){stats.fwd.bytes_read, stats.fwd.bytes_written, stats.extra_bytes_fwd};
    got->bwd = (HbmCounts){stats.bwd.bytes_read, stats.bwd.bytes_written, stats.extra_bytes_bwd};
    return 0;
}

int hbm_run_model(const StageImpl *impl, const HbmModelRow *row, TestProblem *x, size_t M,
                  HbmPassCounts *got, HbmPassCounts *want)
{
    if (hbm_run_counted(impl, x, M, got) != 0)
        return -1;
    *want = row->model(&x->p, M);
    return 0;
}

int hbm_driver_args(int argc, char **argv, const char *stage, Device *device)
{
    const int cuda = argc == 2 && !strcmp(argv[1], "cuda");
    if (argc != 2 || (!cuda && strcmp(argv[1], "cpu"))) {
        fprintf(stderr, "usage: test_hbm_model_%s cpu|cuda\n", stage);
        return 2;
    }
    if (cuda && !cuda_device_available()) {
        printf("no CUDA device: skipped (cuda: %s)\n", cuda_device_description());
        return 77;
    }
    *device = cuda ? DEVICE_CUDA : DEVICE_CPU;
    return -1;
}

/* Every shape (and, for SRAM-based rows, every M) of one row, then its further checks; returns
 * the number of failed checks. */
static int check_row(const HbmDriver *drv, const HbmModelRow *row, int *runs)
{
    const StageImpl *impl = stage_find(drv->stage, row->device, row->variant);
    if (!impl) {
        fprintf(stderr, "stage %s has no %s implementation '%s' in this build\n", drv->stage,
                device_name(row->device), row->variant);
        ++*runs;
        return 1;
    }
    int failures = 0;
    for (int m = 0; m < (row->uses_sram ? HBM_SRAM_COUNT : 1); m++)
        for (int i = 0; i < drv->shape_count; i++, ++*runs)
            failures += drv->check_shape(impl, row, i, row->uses_sram ? hbm_sram_sizes[m] : 0);
    if (drv->after_shapes)
        failures += drv->after_shapes(impl, row, runs);
    return failures;
}

/* A stage built for one architecture, on a machine with a CUDA device: 1 with
 * a line when this build has no CUDA implementation of it, or the GPU is not one it runs on (its
 * forward on a tiny problem answers FL_NO_DEVICE); 0 when its kernels can run. */
static int arch_unavailable(const char *stage)
{
    const StageImpl *impl = stage_find(stage, DEVICE_CUDA, "");
    if (!impl) {
        printf("this build has no stage %s CUDA kernels (its architecture is not among the CUDA "
               "architectures): skipped\n", stage);
        return 1;
    }
    const TestShape tiny = {1, 1, 1, 1, 64, 64};
    const TestFeatures feat = {1, 0};
    TestProblem x;
    if (test_problem_make_with(&x, &tiny, &feat, 77u) != 0)
        return 0; /* out of memory: let the checks report it */
    AttnTensors t = test_problem_tensors(&x);
    RunCtx opts;
    memset(&opts, 0, sizeof opts);
    RunStats stats;
    FlError err = {{0}};
    const int rc = runner_run(impl, DIR_FWD, &x.p, &t, &opts, &stats, &err);
    test_problem_free(&x);
    if (rc == FL_NO_DEVICE)
        printf("%s: skipped\n", err.msg);
    return rc == FL_NO_DEVICE;
}

int hbm_driver_main(const HbmDriver *drv, int argc, char **argv)
{
    Device device;
    const int status = hbm_driver_args(argc, argv, drv->stage, &device);
    if (status >= 0)
        return status;
    int failures = 0, runs = 0;
    for (int r = 0; r < drv->row_count; r++)
        if (drv->rows[r].device == device)
            failures += check_row(drv, &drv->rows[r], &runs);
    printf("%d of %d checks failed\n", failures, runs);
    return failures ? 1 : 0;
}

int hbm_driver_main_one_arch(const HbmDriver *drv, int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "cuda") && cuda_device_available() && arch_unavailable(drv->stage))
        return 77;
    return hbm_driver_main(drv, argc, argv);
}

/* ---- the paged split-KV decode of stages 11 and 16 ------------------------------------------------ */

static int paged_seq_len(const TestPaged *x, int b) { return x->p.page_size > 0 ? x->lens[b] : x->p.Tk; }

/* The keys the query block of packed rows [r0, r0 + rows) walks, in order, into keys (count
 * returned): every key some position between its lowest and furthest row sees. A block that
 * straddles two heads covers every position 0 .. Tq - 1. */
static int paged_block_keys(const TestPaged *x, int b, int r0, int rows, int *keys)
{
    const AttnProblem *p = &x->p;
    AttnProblem sub = *p;
    sub.B = 1, sub.Tk = paged_seq_len(x, b), sub.page_size = 0;
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
static uint64_t paged_table_bytes(const TestPaged *x, const int *keys, int n)
{
    if (x->p.page_size == 0)
        return 0;
    uint64_t pages = 0;
    for (int i = 0; i < n; i++)
        pages += i == 0 || keys[i] / x->p.page_size != keys[i - 1] / x->p.page_size;
    return 4 * pages;
}

HbmCounts hbm_paged_decode_model(const TestPaged *x, uint64_t Br, uint64_t Bc, int splits, uint64_t in_bytes)
{
    const AttnProblem *p = &x->p;
    const uint64_t R = (uint64_t)(p->Hq / p->Hkv) * p->Tq, d = p->d, dv = p->dv;
    const uint64_t N = (uint64_t)p->B * p->Hq * p->Tq, index = p->page_size > 0 ? 4 : 0;
    HbmCounts e = {0, 0, 0};
    int *keys = malloc(sizeof(int) * (size_t)(p->Tk + 1));
    for (int b = 0; keys && b < p->B; b++)
        for (uint64_t r0 = 0; r0 < R; r0 += Br) {
            const uint64_t rows = min_u64(Br, R - r0);
            const int count = paged_block_keys(x, b, (int)r0, (int)rows, keys);
            const int chunk = (count + splits - 1) / splits;
            for (int s = 0; s < splits; s++) {
                const int first = s * chunk < count ? s * chunk : count;
                const int end = first + chunk < count ? first + chunk : count;
                uint64_t read = in_bytes * rows * d + index;
                for (int t0 = first; t0 < end; t0 += (int)Bc) {
                    const int n = (int)min_u64(Bc, (uint64_t)(end - t0));
                    read += in_bytes * (uint64_t)n * (d + dv) + paged_table_bytes(x, keys + t0, n);
                }
                e.read += read * p->Hkv; /* every kv head of a sequence walks the same keys */
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
static int paged_check_run(const StageImpl *impl, TestPaged *x, int shape, size_t M, int splits, double tol,
                           HbmPagedModel model)
{
    RunCtx opts = {0};
    opts.sram_bytes = M, opts.threads = 2, opts.splits = splits;
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
    /* per sequence on its gathered keys, for a paged cache (test_support_paged.c) */
    const double e = ref_attention_max_error(&x->p, x->o, x->lse, ERR_ABS_REL);
    if (!(e <= tol)) {
        fprintf(stderr, "shape %d splits %d M %zu: o/lse error %.3g\n", shape, splits, M, e);
        failures++;
    }
    if (splits == 0)
        return failures;
    const HbmCounts want = model(x, impl, M, splits);
    const HbmCounts got = {stats.fwd.bytes_read, stats.fwd.bytes_written, stats.extra_bytes_fwd};
    printf("shape %d (%s, page %d) splits %d M %zu: error %.2g\n", shape, x->p.page_size ? "paged" : "contiguous",
           x->p.page_size, splits, M, e);
    hbm_print_counts("fwd", &got, &want);
    if (!hbm_counts_equal(&got, &want))
        failures++;
    return failures;
}

int hbm_paged_main(const char *stage, const TestPagedShape *shapes, int shape_count, uint64_t seed_base,
                   int uses_sram, double tol, HbmPagedModel model, int argc, char **argv)
{
    static const int forced_splits[] = {1, 2, 5, 0}; /* 0: the stage's own choice (no count check) */
    Device device;
    const int status = hbm_driver_args(argc, argv, stage, &device);
    if (status >= 0)
        return status;
    const StageImpl *impl = stage_find(stage, device, "");
    if (!impl) {
        fprintf(stderr, "stage %s has no %s implementation in this build\n", stage, device_name(device));
        return 1;
    }
    const int sizes = uses_sram && device == DEVICE_CPU ? HBM_SRAM_COUNT : 1;
    int failures = 0, runs = 0;
    for (int s = 0; s < shape_count; s++) {
        TestPaged x;
        if (test_paged_make(&x, &shapes[s], seed_base + (uint64_t)s) != 0) {
            fprintf(stderr, "shape %d: out of memory\n", s);
            test_paged_free(&x);
            return 1;
        }
        for (int m = 0; m < sizes; m++)
            for (size_t k = 0; k < sizeof forced_splits / sizeof forced_splits[0]; k++, runs++)
                failures += paged_check_run(impl, &x, s, sizes > 1 ? hbm_sram_sizes[m] : 0, forced_splits[k], tol,
                                            model);
        test_paged_free(&x);
    }
    printf("%d of %d checks failed\n", failures, runs);
    return failures ? 1 : 0;
}
