/* fuzz_check.h — comparing what a stage wrote with a float64 reference, for inputs that may be
 * anything a fuzzer writes.
 *
 * The rule (issue 23, docs/design.md#bad-input-and-non-finite-values):
 *   - some input the outputs depend on holds NaN or Inf: an output element whose reference is NaN
 *     must not be finite (a NaN is never turned into a number); nothing else is asked;
 *   - all inputs finite: an element must be within tolerance of its reference, or the reference
 *     must be non-finite there. An infinite reference (the lse of a row that sees no key) must be
 *     met exactly; a reference beyond float32's range, which no float32 output can hold, is not
 *     checked.
 *
 * "Within tolerance" is the project's float32 rule |got - ref| <= tol (1 + |ref|) (docs/
 * conventions.md; CHECK_TOL_FWD for o, lse and y, CHECK_TOL_BWD for gradients), plus the change a
 * rounding-sized nudge of the inputs makes to the reference. That term is what lets the fuzzer
 * feed huge numbers: the tolerance was derived for inputs of size about 1, and where scores are in
 * the millions a float32 computation cannot do better than its inputs' rounding allows. It is
 * measured, not guessed: the reference is computed twice more with every input element scaled by
 * 1 + e, |e| between eta / 2 and eta, signs pseudo-random, and twice the larger change is added.
 * For inputs of size about 1 the term is far below the tolerance.
 *
 * A nudge does not show what the order of a float32 computation loses where its terms cancel
 * (dS = P (dP - D) is 0 for a row that sees a single key, whatever its inputs). So kappa times the
 * size of the terms an element adds up (FuzzMagnitude) is allowed too, kappa being a few roundings
 * per term of the longest sum.
 *
 * Large scores are a limit of float32 itself that no nudge of the inputs shows: a score s of size
 * S carries a rounding error of about u S (u = 2^-24), and a backward pass that recomputes
 * P = exp(s - lse) from a rounded s and a rounded lse gets P wrong by that much, relatively,
 * whatever the inputs. So where that error (score_error, from the caller) is above an output's
 * tolerance, the tolerance cannot be asked for, and that output is held to the finiteness part of
 * the rule only: a finite float32-sized reference needs a finite output, an infinite one the same
 * infinity, a NaN one a non-finite output. */
#ifndef FLASHLAB_FUZZ_CHECK_H
#define FLASHLAB_FUZZ_CHECK_H

#include <stddef.h>

/* One output of a run: n floats and the tolerance they are held to. */
typedef struct {
    const char *name; /* "o", "lse", "dq", ... */
    const float *got;
    size_t n;
    double tol;
} FuzzOutput;

/* One float input of the problem the reference reads, as the pointer the problem holds, so that
 * fuzz_check can point it at a nudged copy for a while. */
typedef struct {
    const float **slot;
    size_t n;
} FuzzInput;

/* Writes the reference of every output, in the order of FuzzCheck.out, one after the other, into
 * ref. 0, or -1 when it cannot (out of memory). */
typedef int (*FuzzReference)(const void *problem, double *ref);
/* Writes, in the same order, the size of the terms each element adds up (given its reference). */
typedef void (*FuzzMagnitude)(const void *problem, const double *ref, double *mag);

enum { FUZZ_MAX_OUTPUTS = 6, FUZZ_MAX_INPUTS = 9 };

typedef struct {
    const char *what; /* names the case in a failure message */
    FuzzOutput out[FUZZ_MAX_OUTPUTS];
    int nout;
    FuzzInput in[FUZZ_MAX_INPUTS];
    int nin;
    FuzzReference reference;
    const void *problem;  /* handed to reference; its input pointers are the slots of `in` */
    int nonfinite_inputs; /* 1: some input element the outputs depend on is NaN or Inf */
    double eta;           /* the size of the nudge, relative (a few float32 roundings) */
    double score_error;   /* rounding error of the largest score (fuzz_score_error) */
    FuzzMagnitude magnitude;
    double kappa; /* rounding allowed per unit of magnitude (fuzz_kappa) */
} FuzzCheck;

/* Compares; fuzz_fail on the first element that breaks the rule, naming it. */
void fuzz_check(const FuzzCheck *c);

/* eta for a computation whose longest chain of float32 roundings has about `chain` steps:
 * 4 (chain + 8) 2^-24. */
double fuzz_eta(int chain);

/* kappa for sums of up to `terms` terms, with scores rounded by score_error: (terms + 8) 2^-24
 * roundings, plus twice score_error (the relative error of P = exp(s - lse)). */
double fuzz_kappa(int terms, double score_error);

/* The float32 rounding error of a score that is a sum of `terms` products whose absolute values
 * add up to at most `magnitude`: (terms + 4) 2^-24 magnitude. */
double fuzz_score_error(int terms, double magnitude);

#endif
