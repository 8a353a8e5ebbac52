/* test_api.c — libflashlab's public interface, version 2 (include/flashlab.h), on the CPU, through
 * the shared library as any caller links it:
 *   - the version, and a caller of version 1 (struct_size of version 1's flashlab_problem);
 *   - flashlab_backward_from on the forward's o and lse equals flashlab_backward bit for bit
 *     (stage 07 causal, 08 GQA, 10 with learned sinks, 12's bf16 reference), reads o and lse
 *     without writing them, and counts the backward pass only;
 *   - bf16 inputs: to a float32 stage, the same outputs as float32 inputs holding the same values
 *     (the library widens them); to stage 12's bf16 CPU reference, the same outputs as float32
 *     inputs it rounds itself (they are handed to it as they are);
 *   - refusals, each with status, one message and every output untouched: device pointers to a
 *     CPU stage, bad memory and dtype values, a too-small struct, missing arrays, a stage without a
 *     backward pass.
 * Exit 0 when every check passed, 1 otherwise. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "flashlab.h"

static int failures;

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* ---- a problem and its arrays ------------------------------------------------------------- */

enum { SENTINEL_BITS = 0x7f7f7f7f }; /* what each output holds before a call: a check that a
                                        refused call wrote nothing compares against it */

typedef struct {
    flashlab_problem p;
    float *q, *k, *v, *dout, *sinks;           /* float32 inputs, values bf16 holds exactly */
    uint16_t *q16, *k16, *v16, *dout16;        /* the same values as bf16 patterns */
    float *o, *lse, *dq, *dk, *dv, *dsinks;    /* outputs */
    size_t nq, nk, nv, no, nlse;
} Problem;

static uint32_t rng_state = 12345u;

/* A value in [-2, 2) that bf16 holds exactly (8 significant bits). */
static float random_bf16_value(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return bf16_round((float)(rng_state >> 8) / (float)(1u << 24) * 4.0f - 2.0f);
}

static float *random_floats(size_t n)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; x && i < n; i++)
        x[i] = random_bf16_value();
    return x;
}

static uint16_t *as_bf16(const float *x, size_t n)
{
    uint16_t *y = malloc(n * sizeof *y);
    for (size_t i = 0; y && i < n; i++)
        y[i] = bf16_from_float(x[i]);
    return y;
}

static float *sentinel_floats(size_t n)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    if (x)
        memset(x, 0x7f, (n ? n : 1) * sizeof *x);
    return x;
}

static int all_sentinel(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        if (u != SENTINEL_BITS)
            return 0;
    }
    return 1;
}

static void reset_outputs(Problem *t)
{
    memset(t->o, 0x7f, t->no * sizeof(float)), memset(t->lse, 0x7f, t->nlse * sizeof(float));
    memset(t->dq, 0x7f, t->nq * sizeof(float)), memset(t->dk, 0x7f, t->nk * sizeof(float));
    memset(t->dv, 0x7f, t->nv * sizeof(float)), memset(t->dsinks, 0x7f, (size_t)t->p.Hq * sizeof(float));
}

static int outputs_untouched(const Problem *t)
{
    return all_sentinel(t->o, t->no) && all_sentinel(t->lse, t->nlse) && all_sentinel(t->dq, t->nq) &&
           all_sentinel(t->dk, t->nk) && all_sentinel(t->dv, t->nv) && all_sentinel(t->dsinks, (size_t)t->p.Hq);
}

static void problem_free(Problem *t)
{
    void *all[] = {t->q, t->k, t->v, t->dout, t->sinks, t->q16, t->k16, t->v16, t->dout16,
                   t->o, t->lse, t->dq, t->dk, t->dv, t->dsinks};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    memset(t, 0, sizeof *t);
}

/* B, Hq, Hkv, Tq, Tk, d (= dv); causal; with learned sinks. 0, or -1 when out of memory. */
static int problem_make(Problem *t, int B, int Hq, int Hkv, int Tq, int Tk, int d, int causal, int with_sinks)
{
    memset(t, 0, sizeof *t);
    flashlab_problem *p = &t->p;
    p->struct_size = sizeof *p;
    p->B = B, p->Hq = Hq, p->Hkv = Hkv, p->Tq = Tq, p->Tk = Tk, p->d = d, p->dv = d, p->causal = causal;
    t->nq = (size_t)B * Hq * Tq * d, t->nk = t->nv = (size_t)B * Hkv * Tk * d;
    t->no = t->nq, t->nlse = (size_t)B * Hq * Tq;
    t->q = random_floats(t->nq), t->k = random_floats(t->nk), t->v = random_floats(t->nv);
    t->dout = random_floats(t->no), t->sinks = with_sinks ? random_floats((size_t)Hq) : NULL;
    t->q16 = as_bf16(t->q, t->nq), t->k16 = as_bf16(t->k, t->nk), t->v16 = as_bf16(t->v, t->nv);
    t->dout16 = as_bf16(t->dout, t->no);
    t->o = sentinel_floats(t->no), t->lse = sentinel_floats(t->nlse), t->dq = sentinel_floats(t->nq);
    t->dk = sentinel_floats(t->nk), t->dv = sentinel_floats(t->nv), t->dsinks = sentinel_floats((size_t)Hq);
    p->q = t->q, p->k = t->k, p->v = t->v, p->sinks = t->sinks;
    const int ok = t->q && t->k && t->v && t->dout && (!with_sinks || t->sinks) && t->q16 && t->k16 && t->v16 &&
                   t->dout16 && t->o && t->lse && t->dq && t->dk && t->dv && t->dsinks;
    return ok ? 0 : -1;
}

/* The problem's inputs as bf16 patterns (dtype FLASHLAB_BF16). */
static void use_bf16_inputs(Problem *t)
{
    t->p.dtype = FLASHLAB_BF16;
    t->p.q = t->q16, t->p.k = t->k16, t->p.v = t->v16;
}

static const void *dout_of(const Problem *t)
{
    return t->p.dtype == FLASHLAB_BF16 ? (const void *)t->dout16 : (const void *)t->dout;
}

static float *copy_floats(const float *x, size_t n)
{
    float *y = malloc((n ? n : 1) * sizeof *y);
    if (y)
        memcpy(y, x, n * sizeof *y);
    return y;
}

static int same_bits(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof *a) == 0;
}

static int finite_all(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return 0;
    return 1;
}

/* The outputs of one call, kept to compare with another's. */
typedef struct {
    float *o, *lse, *dq, *dk, *dv, *dsinks;
} Saved;

static Saved save(const Problem *t)
{
    Saved s = {copy_floats(t->o, t->no), copy_floats(t->lse, t->nlse), copy_floats(t->dq, t->nq),
               copy_floats(t->dk, t->nk), copy_floats(t->dv, t->nv), copy_floats(t->dsinks, (size_t)t->p.Hq)};
    return s;
}

static void saved_free(Saved *s)
{
    free(s->o), free(s->lse), free(s->dq), free(s->dk), free(s->dv), free(s->dsinks);
}

static int backward(const char *stage, Problem *t, flashlab_counters *c)
{
    return flashlab_backward(stage, "", "cpu", &t->p, dout_of(t), t->o, t->lse, t->dq, t->dk, t->dv,
                             t->sinks ? t->dsinks : NULL, c);
}

/* ---- backward_from ------------------------------------------------------------------------ */

/* flashlab_backward_from on flashlab_forward's o and lse equals flashlab_backward bit for bit. */
static void check_backward_from(const char *stage, Problem *t, const char *label)
{
    flashlab_counters both = {sizeof both, 0, 0, 0, 0, 0, 0}, alone = {sizeof alone, 0, 0, 0, 0, 0, 0};
    reset_outputs(t);
    int rc = backward(stage, t, &both);
    EXPECT(rc == FLASHLAB_OK, "%s: flashlab_backward: %d %s", label, rc, flashlab_last_error());
    Saved want = save(t);
    reset_outputs(t);
    rc = flashlab_forward(stage, "", "cpu", &t->p, t->o, t->lse, NULL);
    EXPECT(rc == FLASHLAB_OK, "%s: flashlab_forward: %d %s", label, rc, flashlab_last_error());
    float *o = copy_floats(t->o, t->no), *lse = copy_floats(t->lse, t->nlse);
    rc = flashlab_backward_from(stage, "", "cpu", &t->p, dout_of(t), t->o, t->lse, t->dq, t->dk, t->dv,
                                t->sinks ? t->dsinks : NULL, &alone);
    EXPECT(rc == FLASHLAB_OK, "%s: flashlab_backward_from: %d %s", label, rc, flashlab_last_error());
    EXPECT(same_bits(t->o, o, t->no) && same_bits(t->lse, lse, t->nlse), "%s: o and lse were written", label);
    EXPECT(same_bits(t->o, want.o, t->no) && same_bits(t->lse, want.lse, t->nlse),
           "%s: the forward's o, lse differ from flashlab_backward's", label);
    EXPECT(finite_all(t->dq, t->nq) && finite_all(t->dk, t->nk) && finite_all(t->dv, t->nv),
           "%s: a gradient is not finite (unwritten?)", label);
    EXPECT(same_bits(t->dq, want.dq, t->nq) && same_bits(t->dk, want.dk, t->nk) && same_bits(t->dv, want.dv, t->nv),
           "%s: dq, dk, dv differ from flashlab_backward's", label);
    EXPECT(!t->sinks || same_bits(t->dsinks, want.dsinks, (size_t)t->p.Hq), "%s: dsinks differ", label);
    EXPECT(alone.fwd_read == 0 && alone.fwd_written == 0 && alone.fwd_extra == 0,
           "%s: backward_from counted a forward pass (%llu bytes read)", label, (unsigned long long)alone.fwd_read);
    EXPECT(alone.bwd_read == both.bwd_read && alone.bwd_written == both.bwd_written && alone.bwd_read > 0,
           "%s: backward counts %llu/%llu, backward_from's %llu/%llu", label, (unsigned long long)both.bwd_read,
           (unsigned long long)both.bwd_written, (unsigned long long)alone.bwd_read,
           (unsigned long long)alone.bwd_written);
    printf("%s: backward_from equals forward + backward bit for bit (dq, dk, dv%s), counts the backward "
           "pass only\n", label, t->sinks ? ", dsinks" : "");
    free(o), free(lse);
    saved_free(&want);
}

static void test_backward_from(void)
{
    Problem t;
    if (problem_make(&t, 2, 4, 4, 11, 14, 16, 1, 0) == 0)
        check_backward_from("07", &t, "stage 07 causal");
    problem_free(&t);
    if (problem_make(&t, 1, 6, 2, 9, 9, 24, 1, 0) == 0)
        check_backward_from("08", &t, "stage 08 GQA causal");
    problem_free(&t);
    if (problem_make(&t, 1, 4, 2, 13, 13, 8, 0, 1) == 0) {
        t.p.window = 5, t.p.sink_tokens = 2;
        check_backward_from("10", &t, "stage 10 window, sink tokens, sinks");
    }
    problem_free(&t);
    if (problem_make(&t, 1, 4, 2, 20, 33, 64, 1, 0) == 0) {
        use_bf16_inputs(&t);
        check_backward_from("12", &t, "stage 12 (bf16 reference) bf16 inputs");
    }
    problem_free(&t);
}

/* ---- bf16 inputs -------------------------------------------------------------------------- */

/* The same values as float32 and as bf16 give the same outputs bit for bit. */
static void check_bf16_same_as_float32(const char *stage, Problem *t, const char *label)
{
    t->p.dtype = FLASHLAB_FLOAT32, t->p.q = t->q, t->p.k = t->k, t->p.v = t->v;
    reset_outputs(t);
    int rc = backward(stage, t, NULL);
    EXPECT(rc == FLASHLAB_OK, "%s float32: %d %s", label, rc, flashlab_last_error());
    Saved want = save(t);
    use_bf16_inputs(t);
    reset_outputs(t);
    rc = backward(stage, t, NULL);
    EXPECT(rc == FLASHLAB_OK, "%s bf16: %d %s", label, rc, flashlab_last_error());
    EXPECT(finite_all(t->o, t->no) && finite_all(t->dq, t->nq), "%s: outputs not finite", label);
    EXPECT(same_bits(t->o, want.o, t->no) && same_bits(t->lse, want.lse, t->nlse) &&
           same_bits(t->dq, want.dq, t->nq) && same_bits(t->dk, want.dk, t->nk) && same_bits(t->dv, want.dv, t->nv),
           "%s: bf16 inputs give other outputs than float32 inputs of the same values", label);
    rc = flashlab_forward(stage, "", "cpu", &t->p, t->o, t->lse, NULL);
    EXPECT(rc == FLASHLAB_OK && same_bits(t->o, want.o, t->no), "%s: bf16 forward: %d %s", label, rc,
           flashlab_last_error());
    printf("%s: bf16 inputs give the float32 inputs' o, lse, dq, dk, dv bit for bit\n", label);
    saved_free(&want);
}

static void test_bf16_inputs(void)
{
    Problem t;
    if (problem_make(&t, 1, 4, 2, 10, 12, 16, 1, 0) == 0)
        check_bf16_same_as_float32("08", &t, "stage 08 (float32: the library widens bf16)");
    problem_free(&t);
    if (problem_make(&t, 1, 2, 1, 19, 77, 128, 1, 0) == 0)
        check_bf16_same_as_float32("12", &t, "stage 12 (bf16 reference: bf16 handed over as is)");
    problem_free(&t);
}

/* ---- refusals ----------------------------------------------------------------------------- */

/* A call that must fail with `status`, a message containing `needle`, and nothing written. */
static void expect_refused(int rc, int status, const char *needle, Problem *t, const char *label)
{
    const char *msg = flashlab_last_error();
    EXPECT(rc == status, "%s: status %d, expected %d (%s)", label, rc, status, msg);
    EXPECT(strstr(msg, needle) != NULL, "%s: message '%s' lacks '%s'", label, msg, needle);
    EXPECT(strchr(msg, '\n') == NULL, "%s: the message is not one line", label);
    EXPECT(outputs_untouched(t), "%s: an output was written", label);
    printf("%s: refused (%d): %s\n", label, rc, msg);
}

static void test_refusals(void)
{
    Problem t;
    if (problem_make(&t, 1, 2, 2, 5, 5, 8, 1, 0) != 0) {
        EXPECT(0, "out of memory");
        problem_free(&t);
        return;
    }
    flashlab_problem *p = &t.p;
    reset_outputs(&t);
    p->memory = FLASHLAB_MEMORY_CUDA; /* host arrays said to be device ones: a CPU stage must not read them */
    expect_refused(flashlab_forward("07", "", "cpu", p, t.o, t.lse, NULL), FLASHLAB_BAD_INPUT,
                   "CUDA device pointers", &t, "forward, device memory to a CPU stage");
    expect_refused(backward("07", &t, NULL), FLASHLAB_BAD_INPUT, "CUDA device pointers", &t,
                   "backward, device memory to a CPU stage");
    expect_refused(flashlab_backward_from("07", "", "cpu", p, t.dout, t.o, t.lse, t.dq, t.dk, t.dv, NULL, NULL),
                   FLASHLAB_BAD_INPUT, "CUDA device pointers", &t, "backward_from, device memory to a CPU stage");
    p->memory = 2;
    expect_refused(flashlab_forward("07", "", "cpu", p, t.o, t.lse, NULL), FLASHLAB_BAD_INPUT, "memory = 2", &t,
                   "memory = 2");
    p->memory = FLASHLAB_MEMORY_HOST, p->dtype = 3;
    expect_refused(flashlab_forward("07", "", "cpu", p, t.o, t.lse, NULL), FLASHLAB_BAD_INPUT, "dtype = 3", &t,
                   "dtype = 3");
    p->dtype = -1;
    expect_refused(backward("07", &t, NULL), FLASHLAB_BAD_INPUT, "dtype = -1", &t, "dtype = -1 (backward)");
    p->dtype = FLASHLAB_FLOAT32;
    p->struct_size = offsetof(flashlab_problem, memory) - 1;
    expect_refused(flashlab_forward("07", "", "cpu", p, t.o, t.lse, NULL), FLASHLAB_BAD_INPUT, "struct_size", &t,
                   "struct_size below version 1's");
    p->struct_size = sizeof *p;
    expect_refused(flashlab_backward_from("07", "", "cpu", p, t.dout, NULL, t.lse, t.dq, t.dk, t.dv, NULL, NULL),
                   FLASHLAB_BAD_INPUT, "o and lse", &t, "backward_from without o");
    expect_refused(flashlab_backward_from("07", "", "cpu", p, t.dout, t.o, NULL, t.dq, t.dk, t.dv, NULL, NULL),
                   FLASHLAB_BAD_INPUT, "o and lse", &t, "backward_from without lse");
    expect_refused(flashlab_backward_from("07", "", "cpu", p, NULL, t.o, t.lse, t.dq, t.dk, t.dv, NULL, NULL),
                   FLASHLAB_BAD_INPUT, "dout", &t, "backward_from without dout");
    expect_refused(flashlab_backward_from("07", "", "cpu", p, t.dout, t.o, t.lse, t.dq, NULL, t.dv, NULL, NULL),
                   FLASHLAB_BAD_INPUT, "dk", &t, "backward_from without dk");
    expect_refused(flashlab_backward_from("05", "", "cpu", p, t.dout, t.o, t.lse, t.dq, t.dk, t.dv, NULL, NULL),
                   FLASHLAB_UNSUPPORTED, "stage 06 adds it", &t, "backward_from on stage 05 (forward only)");
    p->sinks = t.dq; /* any Hq floats */
    expect_refused(flashlab_backward_from("10", "", "cpu", p, t.dout, t.o, t.lse, t.dq, t.dk, t.dv, NULL, NULL),
                   FLASHLAB_BAD_INPUT, "dsinks", &t, "backward_from with sinks, without dsinks");
    p->sinks = NULL;
    problem_free(&t);
}

/* ---- versions ----------------------------------------------------------------------------- */

/* A caller built against version 1 passes a struct that ends at sinks: host memory, float32. */
static void test_versions(void)
{
    EXPECT(flashlab_api_version() == FLASHLAB_API_VERSION && FLASHLAB_API_VERSION == 2,
           "library version %d, header %d", flashlab_api_version(), FLASHLAB_API_VERSION);
    Problem t;
    if (problem_make(&t, 1, 2, 2, 7, 7, 8, 1, 0) == 0) {
        int rc = flashlab_forward("07", "", "cpu", &t.p, t.o, t.lse, NULL);
        Saved want = save(&t);
        flashlab_problem v1 = t.p;
        v1.memory = 99, v1.dtype = 99; /* beyond version 1's struct_size: must not be read */
        v1.struct_size = offsetof(flashlab_problem, memory);
        reset_outputs(&t);
        int rc1 = flashlab_forward("07", "", "cpu", &v1, t.o, t.lse, NULL);
        EXPECT(rc == FLASHLAB_OK && rc1 == FLASHLAB_OK, "%d %d %s", rc, rc1, flashlab_last_error());
        EXPECT(same_bits(t.o, want.o, t.no) && same_bits(t.lse, want.lse, t.nlse),
               "a version-1 struct gives other outputs");
        printf("version %d; a version-1 struct (%zu bytes) runs as host float32\n", flashlab_api_version(),
               v1.struct_size);
        saved_free(&want);
    }
    problem_free(&t);
}

int main(void)
{
    test_versions();
    test_backward_from();
    test_bf16_inputs();
    test_refusals();
    if (failures) {
        fprintf(stderr, "test_api: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_api: all checks passed\n");
    return 0;
}
