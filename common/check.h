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

#define CHECK_MAX_SHOWN 5

typedef struct {
    double max_abs_err, max_rel_err; /* over finite reference elements */
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
/* One line "name: max abs 1.2e-07, max rel 3.4e-06, ok" or "... 12 mismatches", then the first
 * mismatches with their index, each on its own indented line. */
void check_print(FILE *f, const char *name, const Tensor *got, const CheckResult *r);

#ifdef __cplusplus
}
#endif
#endif
