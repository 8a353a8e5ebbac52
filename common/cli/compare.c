/* compare.c — a run's outputs against a case's expected files, and the warning for non-finite
 * outputs from finite inputs (docs/conventions.md, "Non-finite values"). */
#include <math.h>
#include <string.h>

#include "cli.h"

/* The summary of a failing case, printed before the per-tensor lines: which tensors are wrong and
 * how many elements, the worst absolute error and where, and the first wrong element. */
static void print_failure_summary(const KindRun *r, const TensorGrade *g, int n)
{
    char list[512] = "", at[96];
    size_t used = 0;
    int worst = -1, first = -1;
    for (int i = 0; i < n; i++) {
        if (g[i].r.mismatches == 0)
            continue;
        used += (size_t)snprintf(list + used, used < sizeof list ? sizeof list - used : 0, "%s%s (%zu of %zu)",
                                 used ? ", " : "", g[i].name, g[i].r.mismatches, tensor_numel(&r->got[i]));
        if (worst < 0 || !(g[i].r.max_abs_err <= g[worst].r.max_abs_err))
            worst = i;
        if (first < 0)
            first = i;
    }
    printf("    FAIL: %s wrong; worst |err| %.2e in %s at %s", list, g[worst].r.max_abs_err, g[worst].name,
           check_index_str(&r->got[worst], g[worst].r.worst_index, at, sizeof at));
    printf("; first wrong: %s at %s\n", g[first].name,
           check_index_str(&r->got[first], g[first].r.first[0].index, at, sizeof at));
}

int compare_run(const Case *c, const KindRun *r, Precision precision, int print, double *max_err,
                TensorGrade *grades, int *ngrades)
{
    TensorGrade g[KIND_MAX_OUTPUTS];
    int failed = 0, n = 0;
    *max_err = 0.0;
    for (int i = 0; i < r->count; i++) {
        const Tensor *got = &r->got[i], *want = c->kind->expected(c, r->file[i]);
        const double tol = check_tolerance(precision, r->gradient[i]);
        char a[64], b[64];
        if (!want)
            fprintf(stderr, "    %s: no expected file in %s\n", r->file[i], c->dir);
        else if (check_tensor(got, want, tol, tol, &g[n].r) != 0)
            fprintf(stderr, "    %s: shape %s but the expected file has %s\n", r->file[i],
                    tensor_shape_str(got, a, sizeof a), tensor_shape_str(want, b, sizeof b));
        else {
            g[n].name = r->file[i];
            failed += g[n].r.mismatches != 0;
            if (g[n].r.max_abs_err > *max_err)
                *max_err = g[n].r.max_abs_err;
            n++;
            continue;
        }
        failed++;
    }
    if (print && failed > 0 && n == r->count)
        print_failure_summary(r, g, n);
    for (int i = 0; i < n && print; i++) {
        char label[80];
        snprintf(label, sizeof label, "    %s", g[i].name);
        check_print(stdout, label, &r->got[i], &g[i].r, print > 1 ? CHECK_MAX_SHOWN : 2);
    }
    for (int i = 0; i < n && grades; i++)
        grades[i] = g[i];
    if (ngrades)
        *ngrades = n;
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
