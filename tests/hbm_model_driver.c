/* hbm_model_driver.c — the shared driver of the HBM-model tests (see hbm_model_driver.h). */
#include "hbm_model_driver.h"

#include <stdio.h>
#include <string.h>

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
