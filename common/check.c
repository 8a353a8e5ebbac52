/* check.c — the one validate path: out vs the float64-derived reference, elementwise
 * |got - want| <= atol + rtol * |want|, with NaN and +-Inf positions required to match. */
#include "check.h"

#include <math.h>
#include <string.h>

static int same_shape(const Tensor *a, const Tensor *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return 0;
    return 1;
}

/* Flat offset -> multi-dimensional index, row-major. */
static void unravel(const Tensor *t, size_t flat, int64_t index[TENSOR_MAX_DIMS])
{
    memset(index, 0, TENSOR_MAX_DIMS * sizeof *index);
    for (int i = t->ndim - 1; i >= 0; i--) {
        index[i] = (int64_t)(flat % (size_t)t->shape[i]);
        flat /= (size_t)t->shape[i];
    }
}

/* Whether got passes for want; updates the error maxima for a finite want (*worst set when this
 * element is the new largest absolute error). */
static int element_ok(float got, float want, double atol, double rtol, CheckResult *r, int *worst)
{
    *worst = 0;
    if (isnan(want))
        return isnan(got);
    if (isinf(want))
        return got == want; /* same infinity, same sign */
    double abs_err = isfinite(got) ? fabs((double)got - (double)want) : INFINITY;
    if (abs_err > r->max_abs_err) {
        r->max_abs_err = abs_err;
        *worst = 1;
    }
    if (fabs((double)want) >= CHECK_REL_FLOOR) {
        double rel_err = abs_err / fabs((double)want);
        if (rel_err > r->max_rel_err)
            r->max_rel_err = rel_err;
    }
    return abs_err <= atol + rtol * fabs((double)want); /* false for a NaN/Inf got */
}

double check_tolerance(Precision precision, int gradient)
{
    if (precision == PRECISION_BF16)
        return gradient ? CHECK_TOL_BWD_BF16 : CHECK_TOL_FWD_BF16;
    return gradient ? CHECK_TOL_BWD : CHECK_TOL_FWD;
}

int check_tensor(const Tensor *got, const Tensor *want, double atol, double rtol, CheckResult *r)
{
    memset(r, 0, sizeof *r);
    if (!same_shape(got, want) || !got->data || !want->data)
        return -1;
    size_t n = tensor_numel(want);
    for (size_t i = 0; i < n; i++) {
        int worst;
        const int ok = element_ok(got->data[i], want->data[i], atol, rtol, r, &worst);
        if (worst || (!ok && r->mismatches == 0 && r->max_abs_err == 0.0)) /* or a NaN/Inf mismatch */
            unravel(want, i, r->worst_index);
        if (ok)
            continue;
        if (r->shown < CHECK_MAX_SHOWN) {
            unravel(want, i, r->first[r->shown].index);
            r->first[r->shown].got = got->data[i];
            r->first[r->shown].want = want->data[i];
            r->shown++;
        }
        r->mismatches++;
    }
    return 0;
}

/* "(b, h, i, j)" for 4-d, "(b, h, i)" for 3-d (lse), "(h)" for 1-d (dsinks). */
static const char *index_names(int ndim)
{
    switch (ndim) {
    case 0: return "()";
    case 1: return "(h)";
    case 2: return "(i, j)";
    case 3: return "(b, h, i)";
    default: return "(b, h, i, j)";
    }
}

const char *check_index_str(const Tensor *t, const int64_t *index, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "(");
    for (int i = 0; i < t->ndim && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, i ? ", %lld" : "%lld", (long long)index[i]);
    if (used < len)
        snprintf(buf + used, len - used, ")");
    return buf;
}

void check_print(FILE *f, const char *name, const Tensor *got, const CheckResult *r, size_t shown)
{
    char at[96];
    if (r->mismatches == 0) {
        fprintf(f, "%s: ok (max abs %.2e, max rel %.2e)\n", name, r->max_abs_err, r->max_rel_err);
        return;
    }
    fprintf(f, "%s: %zu of %zu wrong; max abs %.2e at %s = %s, max rel %.2e\n", name, r->mismatches,
            tensor_numel(got), r->max_abs_err, index_names(got->ndim),
            check_index_str(got, r->worst_index, at, sizeof at), r->max_rel_err);
    const size_t n = shown < r->shown ? shown : r->shown;
    const int indent = (int)strspn(name, " ") + 4; /* under the name line */
    for (size_t m = 0; m < n; m++)
        fprintf(f, "%*sat %s = %s: got %.7g, want %.7g\n", indent, "", index_names(got->ndim),
                check_index_str(got, r->first[m].index, at, sizeof at), r->first[m].got, r->first[m].want);
    if (r->mismatches > n)
        fprintf(f, "%*s... and %zu more%s\n", indent, "", r->mismatches - n,
                n < r->shown ? " (--verbose shows more)" : "");
}
