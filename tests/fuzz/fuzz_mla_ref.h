/* fuzz_mla_ref.h — multi-head latent attention in float64, written straight from the formulas of
 * docs/conventions.md ("MLA cases"): the naive form, every head's keys and values up-projected
 * from the latent cache, no absorption. Stage 09 (absorbed and naive, float32) is compared with it
 * by the fuzzers; the golden files come from make_golden.py's NumPy version of the same formulas. */
#ifndef FLASHLAB_FUZZ_MLA_REF_H
#define FLASHLAB_FUZZ_MLA_REF_H

#include "attn.h"
#include "kind_mla_stage.h"

/* y (B, Tq, D) of p into y. 0, or -1 when out of memory. */
int mla_reference(const MlaProblem *p, double *y);
/* The same, and, where the pointers are not NULL: y_mag (B, Tq, D), the size of the terms each
 * element of y adds up (sum_h sum_e |o_abs,e W_o[h, e, c]| with o_abs = sum_j P_j |ckv_j| |W_uv|),
 * and the largest score magnitude scale (sum_c |q_nope,c k_nope,c| + sum_c |q_pe,c kpe_c|) over
 * every (row, head, key): what the float32 rounding of y and of the scores scales with. */
int mla_reference_full(const MlaProblem *p, double *y, double *y_mag, double *score_magnitude);

#endif
