/* hbm_model_driver.h — the device-agnostic driver shared by the HBM-model tests of stages 07, 08
 * and 10 (and the `cpu|cuda` argument handling of 05 and 06): the row type (one implementation and
 * its closed form), one counted forward + backward run through runner_run, the printing of the
 * counts beside the model, the loop over rows, SRAM sizes and shapes, and main's skeleton. What is
 * specific to a stage (its shapes, its closed forms, its one-line report and its laws) stays in its
 * test file and reaches the driver through HbmDriver's callbacks. */
#ifndef FLASHLAB_TESTS_HBM_MODEL_DRIVER_H
#define FLASHLAB_TESTS_HBM_MODEL_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "test_support.h"

typedef struct {
    uint64_t read, written, workspace; /* bytes of one pass */
} HbmCounts;

typedef struct {
    HbmCounts fwd, bwd;
} HbmPassCounts;

/* One implementation and its closed form (M is 0 for rows with uses_sram = 0). The last fields
 * are read only by the stages that use them:
 *   flash      (07, 10): the row skips masked tiles, so the stage's traffic law applies to it;
 *   fwd_br     (08): the query tile of its FA2 forward for the GQA law (NULL: no FA2 forward). */
typedef struct {
    Device device;
    const char *variant;
    HbmPassCounts (*model)(const AttnProblem *p, size_t M);
    int uses_sram;
    int flash;
    uint64_t (*fwd_br)(const AttnProblem *p, size_t M);
} HbmModelRow;

/* SRAM sizes M for the CPU flash rows: the default and a small one that forces many small blocks. */
enum { HBM_SRAM_COUNT = 2 };
extern const size_t hbm_sram_sizes[HBM_SRAM_COUNT];

/* "flash" for the default variant "", else the variant. */
const char *hbm_variant_name(const char *variant);
const char *hbm_row_name(const HbmModelRow *row);

/* "-", or M for a row that uses it, written into buf (24 bytes); returns buf. */
const char *hbm_sram_label(const HbmModelRow *row, size_t M, char buf[24]);

int hbm_counts_equal(const HbmCounts *a, const HbmCounts *b);

/* "    <pass> read G (model W)  written G (model W)  workspace G (model W)[  <- differs]" */
void hbm_print_counts(const char *pass, const HbmCounts *got, const HbmCounts *want);

/* Runs forward + backward of impl on x with counting on (SRAM size M, 2 threads); fills got.
 * 0 when the run succeeded, else -1 after a line on stderr. */
int hbm_run_counted(const StageImpl *impl, TestProblem *x, size_t M, HbmPassCounts *got);

/* hbm_run_counted, then want = row->model(&x->p, M). */
int hbm_run_model(const StageImpl *impl, const HbmModelRow *row, TestProblem *x, size_t M,
                  HbmPassCounts *got, HbmPassCounts *want);

/* main's arguments: `cpu|cuda`. Returns -1 with *device set when the test goes on; otherwise the
 * exit status: 2 after the usage line (test_hbm_model_<stage> cpu|cuda), 77 without a CUDA device
 * in the cuda mode. */
int hbm_driver_args(int argc, char **argv, const char *stage, Device *device);

/* One stage's test. check_shape: row on shape number `shape` at M (0 for rows without uses_sram);
 * 0 when right. after_shapes (may be NULL): the row's further checks once its shapes ran, adding
 * to *runs what it counts; returns its failures. */
typedef struct {
    const char *stage; /* "07" */
    const HbmModelRow *rows;
    int row_count;
    int shape_count;
    int (*check_shape)(const StageImpl *impl, const HbmModelRow *row, int shape, size_t M);
    int (*after_shapes)(const StageImpl *impl, const HbmModelRow *row, int *runs);
} HbmDriver;

/* The whole main: hbm_driver_args; then for every row of that device, its implementation (a
 * missing one is one failed check), every M (for SRAM-based rows) times every shape, then
 * after_shapes; prints "F of N checks failed" and returns 0 when none failed, else 1. */
int hbm_driver_main(const HbmDriver *drv, int argc, char **argv);

#endif
