/* check.h — the one validate path: compare an output with its float64-derived reference.
 * |out - ref| <= atol + rtol * |ref| elementwise, NaN/Inf positions (and the sign of Inf) must match.
 * Never exits; reports where it failed. */
#ifndef FLASHLAB_CHECK_H
#define FLASHLAB_CHECK_H

#include <stdio.h>

#include "attn.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CHECK_MAX_SHOWN 20  /* mismatches recorded (check_print shows fewer unless asked) */
#define CHECK_REL_FLOOR 1e-3 /* relative errors are taken only where |want| >= this: near zero they
                                say nothing (an error of 1e-9 on 1e-25 is "4e16") */

typedef struct {
    double max_abs_err, max_rel_err; /* over finite reference elements (rel: |want| >= the floor) */
    int64_t worst_index[TENSOR_MAX_DIMS]; /* where max_abs_err is (or the first NaN/Inf disagreement) */
    size_t mismatches;               /* elements outside tolerance, or NaN/Inf disagreement */
    size_t shown;                    /* first mismatches recorded below (<= CHECK_MAX_SHOWN) */
    struct {
        int64_t index[TENSOR_MAX_DIMS]; /* (b, h, i, j) style index */
        float got, want;
    } first[CHECK_MAX_SHOWN];
} CheckResult;

/* Tolerances (atol = rtol) per precision. float32 (stages 01–11, 13): docs/conventions.md. bf16 inputs with
 * float32 accumulation (stage 12): derived in docs/conventions.md ("Precision and tolerance") from
 * bf16's unit roundoff u = 2^-8; never widened to make a stage pass. */
#define CHECK_TOL_FWD 1e-4        /* o, lse (and MLA's y), float32 */
#define CHECK_TOL_BWD 5e-4        /* gradients, float32 */
#define CHECK_TOL_FWD_BF16 0.03125 /* o, lse, bf16: 8u */
#define CHECK_TOL_BWD_BF16 0.0625  /* gradients, bf16: 16u */

/* The tolerance of one output of a stage that computes in `precision`: the forward one for o and
 * lse (gradient = 0), the gradient one for dq, dk, dv, dsinks (gradient = 1). */
double check_tolerance(Precision precision, int gradient);

/* Compares got with want (same shape required: returns -1 if shapes differ, else 0) and fills r.
 * r->mismatches == 0 means the output passes. */
int check_tensor(const Tensor *got, const Tensor *want, double atol, double rtol, CheckResult *r);
/* One line "name: ok (max abs 1.2e-07, max rel 3.4e-06)" or "name: 12 of 240 wrong; max abs 3.1e-02
 * at (b, h, i, j) = (0, 1, 5, 3), max rel ...", then up to `shown` of the first mismatches with their
 * index, each on its own indented line, and how many more there are. */
void check_print(FILE *f, const char *name, const Tensor *got, const CheckResult *r, size_t shown);
/* "(0, 1, 5, 3)" for an index of t's rank into buf. */
const char *check_index_str(const Tensor *t, const int64_t *index, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
