/* hbm_model_driver.h — the device-agnostic driver shared by the HBM-model tests of stages 07, 08
 * and 10 (and the `cpu|cuda` argument handling of 05 and 06): the row type (one implementation and
 * its closed form), one counted forward + backward run through runner_run, the printing of the
 * counts beside the model, the loop over rows, SRAM sizes and shapes, and main's skeleton; and the
 * closed form of the paged decode that stages 11 and 16 share. What is
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

/* The closed form of a paged split-KV decode (docs/hbm_model.md, "Stage 11" and "Stage 16"), worked
 * out from the visibility rule, not from the stages' paged.h: the keys a query block of packed rows
 * walks are found by brute force (every key some position between its lowest and furthest row
 * sees, test_key_visible), numbered in order, cut into chunks of ceil(count / splits) and tiles of
 * Bc keys; a tile of a paged cache reads the table entry of each distinct page it touches. Query
 * blocks of Br packed rows; q, k and v elements of in_bytes bytes (4: float32, 2: bf16); everything
 * written, the table entries and seq_lens 4 bytes. Per (sequence, kv head, query block, split):
 *   read    = in_bytes rows d (Q) + [paged] 4 (seq_lens[b])
 *           + per tile of n keys of its chunk: in_bytes n (d + dv) + [paged] 4 (distinct pages)
 *   written = 4 rows (dv + 1)                      (its partial, or o and lse with one split)
 * and with splits > 1 the combine: read 4 splits N (dv + 1), written 4 N (dv + 1), N = B Hq Tq,
 * which is also the workspace. */
HbmCounts hbm_paged_decode_model(const TestPaged *x, uint64_t Br, uint64_t Bc, int splits, uint64_t in_bytes);

/* A paged decode stage's closed form for impl at SRAM size M (0 on the GPU) and `splits` splits. */
typedef HbmCounts (*HbmPagedModel)(const TestPaged *x, const StageImpl *impl, size_t M, int splits);

/* The main of a paged decode stage's HBM-model test (stages 11 and 16): `cpu|cuda`; then for every
 * shape (seeded from seed_base), every SRAM size on the CPU when uses_sram, the forced split counts
 * 1, 2 and 5 and the stage's own: one counted forward run whose o and lse are within tol of the
 * float64 reference per sequence, and (forced splits) whose counters and workspace equal model's.
 * Prints "F of N checks failed"; 0 when none failed, else 1. */
int hbm_paged_main(const char *stage, const TestPagedShape *shapes, int shape_count, uint64_t seed_base,
                   int uses_sram, double tol, HbmPagedModel model, int argc, char **argv);

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

/* hbm_driver_main for a stage whose CUDA side is built for one architecture (stages 14 and 18:
 * sm_90a): in the cuda mode on a machine with a device, 77 first when this build has no CUDA
 * implementation of the stage or the GPU is not one it runs on. */
int hbm_driver_main_one_arch(const HbmDriver *drv, int argc, char **argv);

#endif
