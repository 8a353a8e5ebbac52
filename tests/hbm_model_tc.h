/* hbm_model_tc.h — what the HBM-model tests of the bf16 tensor-core stages (12 and 14) share: their
 * seven problems, and the check of one problem: both passes' counters equal to the stage's closed
 * form, outputs and gradients within the bf16 tolerance of a float64 reference. Each test keeps its
 * own closed form (the stages' tiles differ). */
#ifndef FLASHLAB_TEST_HBM_MODEL_TC_H
#define FLASHLAB_TEST_HBM_MODEL_TC_H

#include <stdint.h>

#include "hbm_model_driver.h"
#include "test_support.h"

typedef struct {
    TestShape s;
    int Hkv;
    int causal;
} TcShape;

enum { TC_SHAPE_COUNT = 7 };
extern const TcShape tc_shapes[TC_SHAPE_COUNT];

/* K/V rows one query head's forward blocks load: for each block of `rows` query rows, the key tiles
 * of `keys` up to the one holding the last key its last row sees (rows of one head: the last sees
 * the most), i.e. min(Tk, ceil(seen / keys) keys) rows. The blocks are cut from row 0 on, or with
 * from_end from the last row back (stage 14: the short block, if any, holds the first rows). */
uint64_t tc_kv_rows_forward(const AttnProblem *p, int rows, int keys, int from_end);

/* The stage's own tile walk, printed beside each result: K_f (K/V rows one query head's forward
 * loads) and S (query rows it streams past the backward's key tiles). */
typedef void (*TcWalk)(const AttnProblem *p, uint64_t *kf, uint64_t *s);

/* Problem `shape` (seeded from seed_base) run by impl, counted against row's model; 0 when it
 * passes. stage names the test in its report. */
int tc_check_shape(const char *stage, TcWalk walk, uint64_t seed_base, const StageImpl *impl,
                   const HbmModelRow *row, int shape, size_t M);

#endif
