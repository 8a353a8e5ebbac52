/* test_support.h — what the unit and HBM-model tests share: a check macro with one failure
 * counter, a scratch folder, random attention problems, and a float64 attention reference.
 * Linked into every test executable by add_unit_test() in tests/CMakeLists.txt. */
#ifndef FLASHLAB_TEST_SUPPORT_H
#define FLASHLAB_TEST_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "kind_mla_stage.h"
#include "random.h"

/* ---- checks -------------------------------------------------------------------------------- */

/* Counts one failed check and prints "file:line: <message>" to stderr. */
void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* EXPECT(cond): when cond is false, prints it with file:line and counts a failure; the test goes
 * on. */
#define EXPECT(cond)                                                                   \
    do {                                                                               \
        if (!(cond))                                                                   \
            test_fail(__FILE__, __LINE__, "check failed: %s", #cond);                  \
    } while (0)

/* Prints "<name>: all checks passed" (stdout) or "<name>: N check(s) failed" (stderr); returns
 * the process exit code, 0 or 1. */
int test_exit_code(const char *name);

/* The smaller of two byte or element counts (the closed forms of the HBM-model tests). */
static inline uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* n rounded up to a multiple of 16: the floats of one workspace buffer of stages 09 and 17, whose
 * buffers are 64-byte aligned slices (their workspace.h). */
static inline uint64_t round16(uint64_t n) { return (n + 15) / 16 * 16; }

/* ---- scratch folder ------------------------------------------------------------------------ */

/* Creates $TMPDIR/flashlab_<tag>_XXXXXX (/tmp without TMPDIR) into dir; 0, or -1 after perror. */
int test_tmpdir_make(char *dir, size_t len, const char *tag);

/* Removes dir and everything below it. */
void test_tmpdir_remove(const char *dir);

/* ---- random attention problems ------------------------------------------------------------- */

/* n floats ~ N(0, 1) from rng (malloc'd; NULL when out of memory). */
float *test_random_floats(Rng *rng, size_t n);

/* One attention shape; H is the number of query heads Hq (and of kv heads, unless TestFeatures
 * says otherwise). */
typedef struct {
    int B, H, Tq, Tk, d, dv;
} TestShape;

/* What a problem asks for beyond its shape. All zero (or a NULL pointer) is the plain problem:
 * Hkv = H, no mask. Kept apart from TestShape so that the shape lists of the tests stay six
 * numbers each. */
typedef struct {
    int Hkv;    /* kv heads: 0 means H; otherwise H % Hkv == 0 (GQA; 1 = MQA) */
    int causal; /* 1: the causal mask, bottom-right aligned (docs/conventions.md) */
} TestFeatures;

/* Stage 10's mask and sinks (kept apart so the TestFeatures initialisers of the older tests stay
 * two numbers). All zero (or a NULL pointer): none. */
typedef struct {
    int window;      /* W > 0: sliding window of W keys (implies causal); 0 = off */
    int sink_tokens; /* S > 0: keys j < S stay visible (still j <= position) */
    int sinks;       /* 1: learned sink logits (H) ~ N(0, 1), drawn after q, k, v */
} TestSwa;

/* A forward problem (scale 1/sqrt(d)) and its buffers:
 * q (B, H, Tq, d), k (B, Hkv, Tk, d), v (B, Hkv, Tk, dv) ~ N(0, 1), filled in that order from one
 * generator seeded with seed; o (B, H, Tq, dv) and lse (B, H, Tq) poisoned with NaN, so an element
 * a stage leaves unwritten fails. */
typedef struct {
    AttnProblem p;
    float *q, *k, *v, *o, *lse;
    float *dout, *dq, *dk, *dv; /* NULL until test_problem_add_backward */
    float *sinks;  /* (H) learned sink logits when TestFeatures asked for them, else NULL */
    float *dsinks; /* (H), NaN-poisoned by test_problem_add_backward when sinks is set */
} TestProblem;

/* The plain problem of shape s (Hkv = H, no mask). 0, or -1 when out of memory (call
 * test_problem_free either way). */
int test_problem_make(TestProblem *x, const TestShape *s, uint64_t seed);
/* The same with GQA and/or the causal mask from f (NULL: plain). Also -1 when H % Hkv != 0. The
 * plain problem draws the same numbers as test_problem_make. */
int test_problem_make_with(TestProblem *x, const TestShape *s, const TestFeatures *f,
                           uint64_t seed);
/* The same with a window, sink tokens and/or learned sinks from w (NULL: none); q, k, v are the
 * numbers test_problem_make_with draws. */
int test_problem_make_swa(TestProblem *x, const TestShape *s, const TestFeatures *f,
                          const TestSwa *w, uint64_t seed);
void test_problem_free(TestProblem *x);

/* Asks x for the backward pass: dO (B, H, Tq, dv) ~ N(0, 1) from a generator seeded with seed,
 * and dq, dk, dv (shapes of q, k, v) poisoned with NaN; sets x->p.dout. 0, or -1 when out of
 * memory. */
int test_problem_add_backward(TestProblem *x, uint64_t seed);

/* The AttnTensors of x's outputs (o, lse, and the gradients once added; dsinks when x has
 * sinks and a backward, else NULL). */
AttnTensors test_problem_tensors(const TestProblem *x);

/* ---- float64 reference ----------------------------------------------------------------------- */

/* The end of the keys query row i of p may see: all Tk without the causal mask; with it (or a
 * window, which implies it) the keys j <= i + Tk - Tq (bottom-right aligned, docs/conventions.md), so 0 for
 * the first Tq - Tk rows when Tq > Tk. Without window and sink tokens it is the number of keys the
 * row sees (a prefix); with them the row sees a subset of [0, test_keys_seen): test_key_visible. */
int test_keys_seen(const AttnProblem *p, int i);

/* Does query row i of p see key j? docs/conventions.md, written out: j < test_keys_seen(p, i) and, with a
 * window W > 0, j > i + Tk - Tq - W or j < sink_tokens. */
int test_key_visible(const AttnProblem *p, int i, int j);

/* How many keys query row i of p sees (the count of test_key_visible over j). */
int test_keys_visible_count(const AttnProblem *p, int i);

/* The kv head that query head h of batch b reads: b Hkv + h / (Hq / Hkv). */
size_t test_kv_head(const AttnProblem *p, size_t b, size_t h);

/* Attention in double: o (B, Hq, Tq, dv), lse (B, Hq, Tq), rows = B Hq Tq. */
typedef struct {
    double *o, *lse;
    size_t rows, dv;
} RefAttention;

/* Computes the reference of p with p->scale: with or without the causal mask, Hq == Hkv or GQA
 * (Hq % Hkv == 0), a sliding window, sink tokens and learned sinks (docs/conventions.md: the sink logit s_h
 * joins the softmax denominator with a zero value, lse = log(exp(s_h) + sum_j exp(s_ij))). A row
 * that sees no key gets o = 0, lse = -inf, or lse = s_h with sinks. 0, or -1 for another problem
 * or when out of memory (ref is then empty). */
int ref_attention(const AttnProblem *p, RefAttention *ref);
void ref_attention_free(RefAttention *ref);

/* The same for a paged problem (page_size > 0; stage 11): each sequence's keys are gathered from
 * the page pools through its block-table row and computed as a problem of its own with
 * Tk = seq_lens[b] (test_support_paged.c). ref_attention hands paged problems here, so
 * ref_attention_max_error takes them too. 0, or -1 when out of memory or not paged. */
int ref_paged_attention(const AttnProblem *p, RefAttention *ref);

/* Key (or value) j of kv head h of sequence b of a paged problem: slot j % page_size of page
 * block_table[b, j / page_size] of `pool` (p->k or p->v), `width` (d or dv) floats. */
const float *test_paged_row(const AttnProblem *p, const float *pool, int b, int h, int j, int width);

/* ---- paged problems (stage 11) ---------------------------------------------------------------- */

enum { TEST_PAGED_MAX_B = 4 };

/* One paged decode shape: B sequences of lens[b] keys each, their Tq newest queries. */
typedef struct {
    int B, Hq, Hkv, Tq, d, dv;
    int page_size;              /* 0: contiguous K/V, every sequence max(lens) keys */
    int lens[TEST_PAGED_MAX_B]; /* seq_lens */
    int causal, window, sink_tokens, sinks;
} TestPagedShape;

/* A problem and its buffers (paged: k, v are the pools; table and lens are int32). */
typedef struct {
    AttnProblem p;
    float *q, *k, *v, *sinks, *o, *lse;
    int32_t *table, *lens;
} TestPaged;

/* q ~ N(0, 1), then the sinks (when asked for); paged: pools of P = (pages the sequences use) + 2
 * pages, handed out in a shuffled order, used slots ~ N(0, 1) and every other slot NaN (as in the
 * golden cases); contiguous: k, v (B, Hkv, Tk, d|dv) ~ N(0, 1). o and lse poisoned with NaN.
 * 0, or -1 when out of memory (call test_paged_free either way). */
int test_paged_make(TestPaged *x, const TestPagedShape *s, uint64_t seed);
void test_paged_free(TestPaged *x);

/* Gradients of sum(O ∘ dO) in double for the same problems, p->dout required:
 * dq (B, Hq, Tq, d), dk (B, Hkv, Tk, d), dv (B, Hkv, Tk, dv); n* are the element counts. dK and dV
 * of a kv head sum over the query heads of its group; a row that sees no key contributes nothing
 * and gets dq = 0. With sinks: dsinks (Hq), dsinks[h] = -sum over (b, i) of exp(s_h - lse) D,
 * D = rowsum(dO ∘ O) (nsinks = Hq; dsinks NULL and nsinks 0 without sinks). */
typedef struct {
    double *dq, *dk, *dv, *dsinks;
    size_t nq, nk, nv, nsinks;
} RefGradients;

/* 0, or -1 for a problem ref_attention refuses, without dout, or when out of memory. */
int ref_attention_backward(const AttnProblem *p, RefGradients *g);
void ref_gradients_free(RefGradients *g);

/* How an output element is compared with its reference value. */
typedef enum {
    ERR_ABS,     /* |got - want| */
    ERR_ABS_REL, /* |got - want| / (1 + |want|): err <= tol means atol = rtol = tol */
} ErrorMeasure;

/* The error of one element. Infinities must match exactly (the lse = -inf of a row that sees no
 * key): 0 when got == want, INFINITY otherwise; NaN when got is NaN. */
double element_error(double got, double want, ErrorMeasure m);

/* The largest element_error of the outputs o and lse of p against ref_attention(p); NaN when
 * any is NaN, INFINITY when the reference cannot be computed. */
double ref_attention_max_error(const AttnProblem *p, const float *o, const float *lse,
                               ErrorMeasure m);

/* The largest element_error of dq, dk, dv against ref_attention_backward(p); NaN when any is NaN,
 * INFINITY when the reference cannot be computed. */
double ref_gradients_max_error(const AttnProblem *p, const float *dq, const float *dk,
                               const float *dv, ErrorMeasure m);

/* The same, and dsinks (Hq) too when p has sinks and dsinks is not NULL. */
double ref_gradients_max_error_sinks(const AttnProblem *p, const float *dq, const float *dk,
                                     const float *dv, const float *dsinks, ErrorMeasure m);

/* ---- MLA problems (stage 09) ------------------------------------------------------------------ */

/* One MLA shape (attn.h, MlaProblem). */
typedef struct {
    int B, Tq, Tk, D, mq, H, dh, m, p, dv, causal;
} TestMlaShape;

typedef struct {
    MlaProblem p;
    float *in[MLA_INPUT_COUNT]; /* indexed by MlaInput */
} TestMla;

/* The inputs in MlaInput order from one generator seeded with seed: x, ckv, kpe ~ N(0, 1), the
 * weights ~ N(0, 0.2^2); rope_theta 10000, scale 1 / sqrt(dh + p). 0, or -1 when out of memory
 * (nothing left allocated). */
int test_mla_make(TestMla *x, const TestMlaShape *s, uint64_t seed);
void test_mla_free(TestMla *x);

/* Keys the block of stacked rows r0 .. r0 + rows - 1 of p walks (stages 09 and 17: rope.h): all Tk,
 * or under the causal mask the keys up to its last row's position. */
uint64_t test_mla_block_keys(const MlaProblem *p, uint64_t r0, uint64_t rows);

/* y (B, Tq, D) of p in double, straight from the definition of docs/conventions.md ("MLA cases"):
 * per head the up-projected query, keys and values, softmax over the keys each row keeps, then
 * the output projection. A NaN input reaches exactly the outputs that depend on it. 0, or -1 when
 * out of memory. */
int ref_mla(const MlaProblem *p, double *y);
/* The same, and, where the pointers are not NULL: y_mag (B, Tq, D), the size of the terms each
 * element of y adds up (sum_h sum_e |o_abs,e W_o[h, e, c]| with o_abs = sum_j P_j |ckv_j| |W_uv|),
 * and the largest score magnitude scale (sum_c |q_nope,c k_nope,c| + sum_c |q_pe,c kpe_c|) over
 * every (row, head, key): what the float32 rounding of y and of the scores scales with (the
 * fuzzers' tolerance, tests/fuzz/fuzz_check.h). */
int ref_mla_full(const MlaProblem *p, double *y, double *y_mag, double *score_magnitude);

#endif
