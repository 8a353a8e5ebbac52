/* hbm_model_tc.h — what the HBM-model tests of the bf16 tensor-core stages share: stages 12 and 14
 * their seven problems, and all four (12, 14, 15, 18) the check of one problem: both passes'
 * counters equal to the stage's closed form, outputs and gradients (dsinks too) within the bf16
 * tolerance of a float64 reference. Each test keeps its own closed form (the stages' tiles differ). */
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

/* A problem of the window + sinks stages (15 and 18). */
typedef struct {
    TestShape s;
    int Hkv, causal, window, sink_tokens, sinks;
} TcSwaShape;

/* What such a test adds to the shared check: `describe` writes the stage's closed-form terms for a
 * problem into buf (printed beside each result); `compare_parent`, called when the window reaches
 * past every key and there are neither sink tokens nor sinks (the causal mask), runs the parent
 * stage on the problem and holds the stage's counters `got` to it; 0 when they agree. */
typedef struct {
    const char *stage; /* "15" */
    void (*describe)(const AttnProblem *p, char *buf, size_t len);
    int (*compare_parent)(const HbmModelRow *row, TestProblem *x, const HbmPassCounts *got);
} TcSwaTest;

/* Problem g (seeded from seed) run forward and backward by impl, counted against row's model; 0
 * when it passes. */
int tc_swa_check_shape(const TcSwaTest *t, const TcSwaShape *g, uint64_t seed, const StageImpl *impl,
                       const HbmModelRow *row, size_t M);

#endif
