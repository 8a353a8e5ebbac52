/* compare.c — a run's outputs against a case's expected files, and the warning for non-finite
 * outputs from finite inputs (docs/conventions.md, "Non-finite values"). */
#include <math.h>
#include <string.h>

#include "cli.h"

int compare_run(const Case *c, const KindRun *r, Precision precision, int print, double *max_err,
                TensorGrade *grades, int *ngrades)
{
    int failed = 0;
    *max_err = 0.0;
    if (ngrades)
        *ngrades = 0;
    for (int i = 0; i < r->count; i++) {
        const Tensor *got = &r->got[i], *want = c->kind->expected(c, r->file[i]);
        if (!want) {
            fprintf(stderr, "    %s: no expected file in %s\n", r->file[i], c->dir);
            failed++;
            continue;
        }
        const double tol = check_tolerance(precision, r->gradient[i]);
        CheckResult res;
        if (check_tensor(got, want, tol, tol, &res) != 0) {
            char a[64], b[64];
            fprintf(stderr, "    %s: shape %s but the expected file has %s\n", r->file[i],
                    tensor_shape_str(got, a, sizeof a), tensor_shape_str(want, b, sizeof b));
            failed++;
            continue;
        }
        if (print) {
            char label[80];
            snprintf(label, sizeof label, "    %s", r->file[i]);
            check_print(stdout, label, got, &res);
        }
        if (grades)
            grades[(*ngrades)++] = (TensorGrade){r->file[i], res};
        if (res.max_abs_err > *max_err)
            *max_err = res.max_abs_err;
        failed += res.mismatches != 0;
    }
    return failed;
}

/* NaN, or an infinity other than the lse = -inf of a row that sees no key. */
static size_t count_odd_values(const char *file, const Tensor *t, size_t *first)
{
    const int is_lse = strcmp(file, "lse.npy") == 0;
    size_t n = tensor_numel(t), count = 0;
    for (size_t i = 0; i < n; i++) {
        const float v = t->data[i];
        if (isfinite(v) || (is_lse && v == -INFINITY))
            continue;
        if (count++ == 0)
            *first = i;
    }
    return count;
}

void warn_odd_outputs(const Case *c, const KindRun *r)
{
    for (int i = 0; i < r->count && !c->nonfinite_inputs; i++) {
        size_t first = 0, count = count_odd_values(r->file[i], &r->got[i], &first);
        char index[96];
        if (count)
            fl_warn("%s: %s has %zu non-finite value%s from finite inputs, the first at %s", c->name, r->file[i],
                    count, count == 1 ? "" : "s", tensor_index_str(&r->got[i], first, index, sizeof index));
    }
}
