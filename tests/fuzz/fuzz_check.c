/* fuzz_check.c — the comparison rule of fuzz_check.h. */
#include "fuzz_check.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_support.h"

double fuzz_eta(int chain) { return 4.0 * (chain + 8) * 0x1p-24; }

double fuzz_score_error(int terms, double magnitude) { return (terms + 4) * 0x1p-24 * magnitude; }

double fuzz_kappa(int terms, double score_error) { return (terms + 8) * 0x1p-24 + 2.0 * score_error; }

static size_t total_outputs(const FuzzCheck *c)
{
    size_t n = 0;
    for (int i = 0; i < c->nout; i++)
        n += c->out[i].n;
    return n;
}

static double *reference_or_fail(const FuzzCheck *c, size_t n)
{
    double *ref = malloc(sizeof(double) * (n + 1));
    if (!ref || c->reference(c->problem, ref) != 0)
        fuzz_fail("%s: the float64 reference could not be computed", c->what);
    return ref;
}

/* splitmix64: the signs and sizes of the nudges, the same on every run. */
static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A copy of x (n floats), each element times 1 + e with eta / 2 <= |e| <= eta; one that would
 * leave float32's range stays as it was (a nudge makes no infinity). */
static float *nudged_copy(const float *x, size_t n, double eta, uint64_t *state)
{
    float *y = malloc(sizeof(float) * (n + 1));
    if (!y)
        fuzz_fail("out of memory for a nudged input");
    for (size_t i = 0; i < n; i++) {
        const uint64_t r = next_random(state);
        const double size = eta * (0.5 + 0.5 * (double)(r >> 11) * 0x1p-53);
        y[i] = (float)((double)x[i] * (1.0 + (r & 1 ? size : -size)));
        if (isinf(y[i]) && isfinite(x[i]))
            y[i] = x[i];
    }
    return y;
}

/* The reference with every input nudged (seed picks the nudges). */
static double *nudged_reference(const FuzzCheck *c, size_t n, uint64_t seed)
{
    const float *saved[FUZZ_MAX_INPUTS];
    float *copies[FUZZ_MAX_INPUTS];
    for (int i = 0; i < c->nin; i++) {
        saved[i] = *c->in[i].slot;
        copies[i] = saved[i] ? nudged_copy(saved[i], c->in[i].n, c->eta, &seed) : NULL;
        *c->in[i].slot = copies[i] ? copies[i] : saved[i];
    }
    double *ref = reference_or_fail(c, n);
    for (int i = 0; i < c->nin; i++) {
        *c->in[i].slot = saved[i];
        free(copies[i]);
    }
    return ref;
}

/* Whether a float64 number is one a float32 output can hold (finite and in range). */
static int representable(double x) { return isfinite(x) && fabs(x) <= FLT_MAX; }

/* NaN inputs: a NaN reference must give a non-finite output. */
static void check_nan_rule(const FuzzCheck *c, const FuzzOutput *o, const double *ref)
{
    for (size_t i = 0; i < o->n; i++)
        if (isnan(ref[i]) && isfinite(o->got[i]))
            fuzz_fail("%s: %s[%zu] = %.9g is finite, but its reference is NaN (the inputs hold NaN "
                      "or Inf, and a NaN must stay NaN)",
                      c->what, o->name, i, o->got[i]);
}

/* Finite inputs: the tolerance plus the measured sensitivity (fuzz_check.h); only finiteness
 * where the scores' own rounding is above the tolerance. */
static void check_element(const FuzzCheck *c, const FuzzOutput *o, size_t i, double ref, double a,
                          double b, double mag)
{
    const double got = o->got[i];
    if (isnan(ref)) {
        if (isfinite(got))
            fuzz_fail("%s: %s[%zu] = %.9g, but its reference is NaN", c->what, o->name, i, got);
        return;
    }
    if (isinf(ref)) {
        if (got != ref)
            fuzz_fail("%s: %s[%zu] = %.9g, but its reference is %g", c->what, o->name, i, got, ref);
        return;
    }
    const int edge = !representable(a) || !representable(b); /* a nudge leaves float32's range */
    if (!representable(ref) || (edge && !isfinite(got)))
        return; /* no float32 answer to hold it to */
    if (!isfinite(got) && (fabs(ref) > 1e30 || mag > 1e30))
        return; /* terms past 1e30 (~2^100): float32 may overflow on the way; the tool warns about a
                   non-finite output from finite inputs (docs/conventions.md), which is all that is asked */
    if (!isfinite(got))
        fuzz_fail("%s: %s[%zu] = %.9g, but its reference %.9g is finite (all inputs are finite)",
                  c->what, o->name, i, got, ref);
    if (edge || !(c->score_error <= o->tol))
        return; /* scores too large for the tolerance: finiteness is all that is asked */
    const double spread = fmax(fabs(a - ref), fabs(b - ref));
    const double allowed = o->tol * (1.0 + fabs(ref)) + 2.0 * spread + c->kappa * mag;
    if (!(fabs(got - ref) <= allowed))
        fuzz_fail("%s: %s[%zu] = %.9g, reference %.9g: error %.3g above the %.3g allowed "
                  "(tolerance %g, sensitivity %.3g, terms of size %.3g)",
                  c->what, o->name, i, got, ref, fabs(got - ref), allowed, o->tol, spread, mag);
}

void fuzz_check(const FuzzCheck *c)
{
    const size_t n = total_outputs(c);
    double *ref = reference_or_fail(c, n);
    double *a = c->nonfinite_inputs ? NULL : nudged_reference(c, n, 1);
    double *b = c->nonfinite_inputs ? NULL : nudged_reference(c, n, 2);
    double *mag = calloc(n + 1, sizeof(double));
    if (!mag)
        fuzz_fail("out of memory for the magnitudes");
    if (c->magnitude && !c->nonfinite_inputs)
        c->magnitude(c->problem, ref, mag);
    size_t at = 0;
    for (int k = 0; k < c->nout; k++) {
        const FuzzOutput *o = &c->out[k];
        if (c->nonfinite_inputs)
            check_nan_rule(c, o, ref + at);
        for (size_t i = 0; !c->nonfinite_inputs && i < o->n; i++)
            check_element(c, o, i, ref[at + i], a[at + i], b[at + i], mag[at + i]);
        at += o->n;
    }
    free(ref), free(a), free(b), free(mag);
}
