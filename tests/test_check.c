/* test_check.c — the checker: |got - want| <= atol + rtol * |want| elementwise, NaN/Inf positions
 * matched, mismatches reported with their (b, h, i, j) index. */
#define _GNU_SOURCE /* open_memstream */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "test_support.h"

/* (2, 3, 4, 5) filled with distinct values of both signs. */
static void make_reference(Tensor *t)
{
    int64_t shape[4] = {2, 3, 4, 5};
    if (tensor_alloc_poisoned(t, 4, shape) != 0)
        exit(2);
    for (size_t i = 0; i < tensor_numel(t); i++)
        t->data[i] = (float)i * 0.013f - 0.7f;
}

static void copy_tensor(Tensor *dst, const Tensor *src)
{
    if (tensor_alloc_poisoned(dst, src->ndim, src->shape) != 0)
        exit(2);
    memcpy(dst->data, src->data, tensor_bytes(src));
}

/* flat offset of (b, h, i, j) in a (2, 3, 4, 5) tensor */
static size_t at(int b, int h, int i, int j)
{
    return (((size_t)b * 3 + h) * 4 + i) * 5 + j;
}

static char *print_to_string(const char *name, const Tensor *got, const CheckResult *r)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        exit(2);
    check_print(f, name, got, r, 5);
    fclose(f);
    return text;
}

static void test_exact_match(void)
{
    Tensor want, got;
    make_reference(&want);
    copy_tensor(&got, &want);
    CheckResult r;
    EXPECT(check_tensor(&got, &want, 0.0, 0.0, &r) == 0);
    EXPECT(r.mismatches == 0 && r.shown == 0);
    EXPECT(r.max_abs_err == 0.0 && r.max_rel_err == 0.0);
    char *text = print_to_string("o", &got, &r);
    EXPECT(strncmp(text, "o: ok (max abs 0.00e+00, max rel 0.00e+00)\n", 64) == 0);
    free(text);
    tensor_free(&want);
    tensor_free(&got);
}

static void test_one_element_off(void)
{
    Tensor want, got;
    make_reference(&want);
    copy_tensor(&got, &want);
    size_t off = at(1, 2, 3, 1);
    got.data[off] += 0.01f;
    CheckResult r;
    EXPECT(check_tensor(&got, &want, 1e-4, 1e-4, &r) == 0);
    EXPECT(r.mismatches == 1 && r.shown == 1);
    EXPECT(r.first[0].index[0] == 1 && r.first[0].index[1] == 2 && r.first[0].index[2] == 3 &&
           r.first[0].index[3] == 1);
    EXPECT(r.first[0].got == got.data[off] && r.first[0].want == want.data[off]);
    EXPECT(fabs(r.max_abs_err - 0.01) < 1e-6);
    EXPECT(fabs(r.max_rel_err - 0.01 / fabs(want.data[off])) < 1e-4);

    char *text = print_to_string("dq", &got, &r);
    char line[128];
    snprintf(line, sizeof line, "    at (b, h, i, j) = (1, 2, 3, 1): got %.7g, want %.7g\n",
             got.data[off], want.data[off]);
    EXPECT(strstr(text, "dq: 1 of 120 wrong; max abs ") == text);
    EXPECT(strstr(text, "at (b, h, i, j) = (1, 2, 3, 1), max rel") != NULL); /* the worst element */
    EXPECT(strstr(text, line) != NULL);
    free(text);
    tensor_free(&want);
    tensor_free(&got);
}

static void test_poisoned_output_fails(void)
{
    Tensor want, got;
    make_reference(&want);
    EXPECT(tensor_alloc_poisoned(&got, want.ndim, want.shape) == 0); /* a stage that wrote nothing */
    got.data[at(0, 0, 0, 0)] = want.data[at(0, 0, 0, 0)];           /* ... but one element */
    CheckResult r;
    EXPECT(check_tensor(&got, &want, 1.0, 1.0, &r) == 0);
    EXPECT(r.mismatches == tensor_numel(&want) - 1);
    EXPECT(r.shown == CHECK_MAX_SHOWN);
    EXPECT(r.first[0].index[3] == 1 && isnan(r.first[0].got));
    EXPECT(!(r.max_abs_err < 1.0)); /* NaN counts as an unbounded error, never as a small one */
    char *text = print_to_string("o", &got, &r);
    EXPECT(strstr(text, "... and 114 more (--verbose shows more)") != NULL); /* 5 of 119 shown */
    free(text);
    tensor_free(&want);
    tensor_free(&got);
}

static void test_special_values(void)
{
    int64_t shape[3] = {1, 1, 4};
    Tensor want, got;
    EXPECT(tensor_alloc_poisoned(&want, 3, shape) == 0);
    EXPECT(tensor_alloc_poisoned(&got, 3, shape) == 0);
    /* lse of a row that sees no key is -inf: matching -inf passes */
    const float w[4] = {-INFINITY, 1.0f, INFINITY, NAN};
    memcpy(want.data, w, sizeof w);
    memcpy(got.data, w, sizeof w);
    CheckResult r;
    EXPECT(check_tensor(&got, &want, 1e-4, 1e-4, &r) == 0);
    EXPECT(r.mismatches == 0);
    EXPECT(r.max_abs_err == 0.0);

    got.data[0] = INFINITY; /* +inf where -inf is expected */
    EXPECT(check_tensor(&got, &want, 1e-4, 1e-4, &r) == 0);
    EXPECT(r.mismatches == 1 && r.first[0].index[2] == 0);

    got.data[0] = -1e30f; /* a huge finite number is not -inf */
    EXPECT(check_tensor(&got, &want, 1e30, 1e30, &r) == 0);
    EXPECT(r.mismatches == 1);

    got.data[0] = -INFINITY;
    got.data[1] = INFINITY; /* Inf where a number is expected */
    EXPECT(check_tensor(&got, &want, 1e-4, 1e-4, &r) == 0);
    EXPECT(r.mismatches == 1 && r.first[0].index[2] == 1);

    got.data[1] = 1.0f;
    got.data[3] = 0.0f; /* a number where NaN is expected */
    EXPECT(check_tensor(&got, &want, 1e-4, 1e-4, &r) == 0);
    EXPECT(r.mismatches == 1 && r.first[0].index[2] == 3);
    char *text = print_to_string("lse", &got, &r);
    EXPECT(strstr(text, "    at (b, h, i) = (0, 0, 3): got 0, want nan\n") != NULL);
    free(text);
    tensor_free(&want);
    tensor_free(&got);
}

/* The bound is atol + rtol * |want|: relative to the reference, not to the output. */
static void test_tolerance_boundary(void)
{
    int64_t n = 1;
    Tensor want, got;
    EXPECT(tensor_alloc_poisoned(&want, 1, &n) == 0);
    EXPECT(tensor_alloc_poisoned(&got, 1, &n) == 0);
    CheckResult r;
    const double atol = 1e-3, rtol = 1e-2;
    /* want = 2: bound = 0.001 + 0.02 = 0.021 */
    want.data[0] = 2.0f;
    got.data[0] = 2.0205f;
    EXPECT(check_tensor(&got, &want, atol, rtol, &r) == 0 && r.mismatches == 0);
    got.data[0] = 2.0215f;
    EXPECT(check_tensor(&got, &want, atol, rtol, &r) == 0 && r.mismatches == 1);
    got.data[0] = 1.9795f;
    EXPECT(check_tensor(&got, &want, atol, rtol, &r) == 0 && r.mismatches == 0);
    got.data[0] = 1.9785f;
    EXPECT(check_tensor(&got, &want, atol, rtol, &r) == 0 && r.mismatches == 1);

    /* want = -100, atol = 0: bound 1.0 whatever the output's own size */
    want.data[0] = -100.0f;
    got.data[0] = -100.9f;
    EXPECT(check_tensor(&got, &want, 0.0, rtol, &r) == 0 && r.mismatches == 0);
    got.data[0] = -101.1f; /* within rtol * |got| = 1.011, but not within rtol * |want| */
    EXPECT(check_tensor(&got, &want, 0.0, rtol, &r) == 0 && r.mismatches == 1);

    /* want = 0: only atol counts, and no relative error is reported */
    want.data[0] = 0.0f;
    got.data[0] = 0.0009f;
    EXPECT(check_tensor(&got, &want, atol, rtol, &r) == 0 && r.mismatches == 0);
    EXPECT(r.max_rel_err == 0.0 && fabs(r.max_abs_err - 0.0009) < 1e-9);
    got.data[0] = -0.0011f;
    EXPECT(check_tensor(&got, &want, atol, rtol, &r) == 0 && r.mismatches == 1);
    tensor_free(&want);
    tensor_free(&got);
}

static void test_shape_mismatch(void)
{
    Tensor want, got;
    make_reference(&want);
    int64_t shape[4] = {2, 3, 5, 4}; /* same element count, different shape */
    EXPECT(tensor_alloc_poisoned(&got, 4, shape) == 0);
    CheckResult r;
    EXPECT(check_tensor(&got, &want, 1e-4, 1e-4, &r) == -1);
    tensor_free(&got);
    EXPECT(tensor_alloc_poisoned(&got, 3, shape) == 0);
    EXPECT(check_tensor(&got, &want, 1e-4, 1e-4, &r) == -1);
    tensor_free(&got);
    tensor_free(&want);
}

/* The tolerance follows the precision: float32's are those of docs/conventions.md, unchanged; bf16's are
 * docs/conventions.md's 8u and 16u (u = 2^-8). A bf16-sized error fails float32 and passes bf16. */
static void test_tolerance_per_precision(void)
{
    EXPECT(check_tolerance(PRECISION_F32, 0) == 1e-4 && check_tolerance(PRECISION_F32, 1) == 5e-4);
    EXPECT(check_tolerance(PRECISION_BF16, 0) == 8.0 / 256 && check_tolerance(PRECISION_BF16, 1) == 16.0 / 256);
    Tensor want, got;
    make_reference(&want);
    copy_tensor(&got, &want);
    got.data[at(1, 2, 3, 4)] += 0.01f; /* about 2.5u of bf16 */
    CheckResult r;
    double tol = check_tolerance(PRECISION_F32, 0);
    EXPECT(check_tensor(&got, &want, tol, tol, &r) == 0 && r.mismatches == 1);
    tol = check_tolerance(PRECISION_BF16, 0);
    EXPECT(check_tensor(&got, &want, tol, tol, &r) == 0 && r.mismatches == 0);
    got.data[at(1, 2, 3, 4)] = want.data[at(1, 2, 3, 4)] + 0.1f; /* a bug's size, not rounding's */
    EXPECT(check_tensor(&got, &want, tol, tol, &r) == 0 && r.mismatches == 1);
    tensor_free(&want);
    tensor_free(&got);
}

int main(void)
{
    test_exact_match();
    test_one_element_off();
    test_poisoned_output_fails();
    test_special_values();
    test_tolerance_boundary();
    test_shape_mismatch();
    test_tolerance_per_precision();
    return test_exit_code("test_check");
}
