/* test_support.c — the helpers declared in test_support.h. */
#define _GNU_SOURCE /* mkdtemp, nftw */
#include "test_support.h"

#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- checks -------------------------------------------------------------------------------- */

static int failures;

void test_fail(const char *file, int line, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, "%s:%d: ", file, line);
    vfprintf(stderr, fmt, args);
    fputc('\n', stderr);
    va_end(args);
    failures++;
}

int test_exit_code(const char *name)
{
    if (failures)
        fprintf(stderr, "%s: %d check(s) failed\n", name, failures);
    else
        printf("%s: all checks passed\n", name);
    return failures ? 1 : 0;
}

/* ---- scratch folder ------------------------------------------------------------------------ */

int test_tmpdir_make(char *dir, size_t len, const char *tag)
{
    const char *root = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, len, "%s/flashlab_%s_XXXXXX", root, tag);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return -1;
    }
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

void test_tmpdir_remove(const char *dir)
{
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- random attention problems ------------------------------------------------------------- */

float *test_random_floats(Rng *rng, size_t n)
{
    float *x = malloc(sizeof(float) * (n ? n : 1));
    if (x)
        rng_fill_normal(rng, x, n, 1.0f);
    return x;
}

static float *nan_floats(size_t n)
{
    float *x = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; x && i < n; i++)
        x[i] = NAN;
    return x;
}

int test_problem_make(TestProblem *x, const TestShape *s, uint64_t seed)
{
    return test_problem_make_with(x, s, NULL, seed);
}

int test_problem_make_with(TestProblem *x, const TestShape *s, const TestFeatures *f,
                           uint64_t seed)
{
    return test_problem_make_swa(x, s, f, NULL, seed);
}

int test_problem_make_swa(TestProblem *x, const TestShape *s, const TestFeatures *f,
                          const TestSwa *w, uint64_t seed)
{
    memset(x, 0, sizeof *x);
    const int Hkv = f && f->Hkv > 0 ? f->Hkv : s->H;
    if (s->H % Hkv != 0)
        return -1;
    const size_t rows_q = (size_t)s->B * s->H * s->Tq, rows_k = (size_t)s->B * Hkv * s->Tk;
    Rng rng;
    rng_seed(&rng, seed);
    x->q = test_random_floats(&rng, rows_q * s->d);
    x->k = test_random_floats(&rng, rows_k * s->d);
    x->v = test_random_floats(&rng, rows_k * s->dv);
    x->o = nan_floats(rows_q * s->dv);
    x->lse = nan_floats(rows_q);
    if (!x->q || !x->k || !x->v || !x->o || !x->lse)
        return -1;
    if (w && w->sinks && !(x->sinks = test_random_floats(&rng, (size_t)s->H)))
        return -1;
    AttnProblem p = {.B = s->B, .Hq = s->H, .Hkv = Hkv, .Tq = s->Tq, .Tk = s->Tk, .d = s->d,
                     .dv = s->dv, .scale = (float)(1.0 / sqrt((double)s->d)),
                     .causal = (f && f->causal) || (w && w->window > 0),
                     .window = w ? w->window : 0, .sink_tokens = w ? w->sink_tokens : 0,
                     .sinks = x->sinks, .q = x->q, .k = x->k, .v = x->v};
    x->p = p;
    return 0;
}

void test_problem_free(TestProblem *x)
{
    free(x->q), free(x->k), free(x->v), free(x->o), free(x->lse);
    free(x->dout), free(x->dq), free(x->dk), free(x->dv);
    free(x->sinks), free(x->dsinks);
    memset(x, 0, sizeof *x);
}

int test_problem_add_backward(TestProblem *x, uint64_t seed)
{
    const AttnProblem *p = &x->p;
    const size_t rows_q = (size_t)p->B * p->Hq * p->Tq, rows_k = (size_t)p->B * p->Hkv * p->Tk;
    Rng rng;
    rng_seed(&rng, seed);
    x->dout = test_random_floats(&rng, rows_q * p->dv);
    x->dq = nan_floats(rows_q * p->d);
    x->dk = nan_floats(rows_k * p->d);
    x->dv = nan_floats(rows_k * p->dv);
    if (!x->dout || !x->dq || !x->dk || !x->dv)
        return -1;
    if (x->sinks && !(x->dsinks = nan_floats((size_t)p->Hq)))
        return -1;
    x->p.dout = x->dout;
    return 0;
}

AttnTensors test_problem_tensors(const TestProblem *x)
{
    AttnTensors t = {x->o, x->lse, x->dq, x->dk, x->dv, x->dq ? x->dsinks : NULL};
    return t;
}

/* ---- float64 reference ----------------------------------------------------------------------- */

int test_keys_seen(const AttnProblem *p, int i)
{
    if (!p->causal && p->window <= 0)
        return p->Tk;
    const long n = (long)i + p->Tk - p->Tq + 1; /* keys j <= i + Tk - Tq */
    return n <= 0 ? 0 : n >= p->Tk ? p->Tk : (int)n;
}

int test_key_visible(const AttnProblem *p, int i, int j)
{
    if (j < 0 || j >= test_keys_seen(p, i))
        return 0; /* past the row's position (or past Tk) */
    const long pos = (long)i + p->Tk - p->Tq;
    return p->window <= 0 || j > pos - p->window || j < p->sink_tokens;
}

int test_keys_visible_count(const AttnProblem *p, int i)
{
    int n = 0;
    for (int j = 0; j < p->Tk; j++)
        n += test_key_visible(p, i, j);
    return n;
}

size_t test_kv_head(const AttnProblem *p, size_t b, size_t h)
{
    return b * (size_t)p->Hkv + h / (size_t)(p->Hq / p->Hkv);
}

/* What the reference computes: Hq a multiple of Hkv, window and sink tokens not negative. */
static int ref_supported(const AttnProblem *p)
{
    return p->Hkv > 0 && p->Hq % p->Hkv == 0 && p->window >= 0 && p->sink_tokens >= 0;
}

/* The slices of query head bh = b Hq + h and of the kv head it reads. */
typedef struct {
    const float *q, *k, *v, *dout; /* q (Tq, d), k (Tk, d), v (Tk, dv), dout (Tq, dv) or NULL */
    size_t kvh;                    /* its kv head, b Hkv + h / (Hq / Hkv) */
} RefHead;

static RefHead ref_head(const AttnProblem *p, size_t bh)
{
    const size_t Tq = p->Tq, Tk = p->Tk;
    RefHead x;
    x.kvh = test_kv_head(p, bh / (size_t)p->Hq, bh % (size_t)p->Hq);
    x.q = p->q + bh * Tq * p->d;
    x.k = p->k + x.kvh * Tk * p->d;
    x.v = p->v + x.kvh * Tk * p->dv;
    x.dout = p->dout ? p->dout + bh * Tq * p->dv : NULL;
    return x;
}

/* The learned sink logit of query head bh % Hq, or -inf without sinks. */
static double ref_sink(const AttnProblem *p, size_t bh)
{
    return p->sinks ? (double)p->sinks[bh % (size_t)p->Hq] : -INFINITY;
}

/* Query row i of a head: s = q_i K^T * scale over the keys it sees (test_key_visible; -inf for
 * the others), the sink logit `sink` (-inf: none) as one more score with a zero value,
 * lse = m + log(l) over the seen scores and the sink, o_i = sum_j exp(s_j - lse) v_j (dv). A row
 * that sees no key: o_i = 0, lse = sink (-inf without sinks). Returns the number of keys seen. */
static int reference_row(const AttnProblem *p, int i, const float *qi, const float *k,
                         const float *v, double sink, double *s, double *o, double *lse)
{
    double m = sink, l = 0.0;
    int n = 0;
    for (int j = 0; j < p->Tk; j++) {
        if (!test_key_visible(p, i, j)) {
            s[j] = -INFINITY;
            continue;
        }
        double dot = 0.0;
        for (int c = 0; c < p->d; c++)
            dot += (double)qi[c] * k[(size_t)j * p->d + c];
        s[j] = dot * p->scale;
        m = s[j] > m ? s[j] : m;
        n++;
    }
    /* No key and no sink. (Not m == -inf: a row whose scores are all NaN has that too, and its
     * o and lse must come out NaN.) */
    if (n == 0 && sink == -INFINITY) {
        *lse = -INFINITY;
        for (int c = 0; c < p->dv; c++)
            o[c] = 0.0;
        return 0;
    }
    for (int j = 0; j < p->Tk; j++)
        if (s[j] != -INFINITY)
            l += exp(s[j] - m);
    if (sink != -INFINITY)
        l += exp(sink - m);
    *lse = m + log(l);
    for (int c = 0; c < p->dv; c++) {
        double acc = 0.0;
        for (int j = 0; j < p->Tk; j++)
            if (s[j] != -INFINITY)
                acc += exp(s[j] - *lse) * v[(size_t)j * p->dv + c];
        o[c] = acc;
    }
    return n;
}

int ref_attention(const AttnProblem *p, RefAttention *ref)
{
    if (p->page_size > 0)
        return ref_paged_attention(p, ref);
    memset(ref, 0, sizeof *ref);
    if (!ref_supported(p))
        return -1;
    const size_t heads = (size_t)p->B * p->Hq, Tq = p->Tq, Tk = p->Tk, d = p->d, dv = p->dv;
    ref->rows = heads * Tq;
    ref->dv = dv;
    ref->o = malloc(sizeof(double) * ref->rows * dv);
    ref->lse = malloc(sizeof(double) * ref->rows);
    double *s = malloc(sizeof(double) * (Tk + 1));
    if (!ref->o || !ref->lse || !s) {
        free(s);
        ref_attention_free(ref);
        return -1;
    }
    for (size_t bh = 0; bh < heads; bh++) {
        const RefHead x = ref_head(p, bh);
        for (size_t i = 0; i < Tq; i++) {
            const size_t r = bh * Tq + i;
            reference_row(p, (int)i, x.q + i * d, x.k, x.v, ref_sink(p, bh), s, ref->o + r * dv,
                          ref->lse + r);
        }
    }
    free(s);
    return 0;
}

void ref_attention_free(RefAttention *ref)
{
    free(ref->o), free(ref->lse);
    memset(ref, 0, sizeof *ref);
}

/* The gradients of one query head in double (P from its scores and lse, then the textbook
 * formulas), over the keys each row sees (P = 0 for the others):
 * dV = P^T dO, dP = dO V^T, D = rowsum(P ∘ dP) = rowsum(dO ∘ O), dS = P ∘ (dP - D),
 * dQ = scale dS K, dK = scale dS^T Q, and with sinks dsinks[h] -= exp(s_h - lse) D per row.
 * dQ of the head is written; dK, dV (and dsinks) are added into its kv head's (zeroed by the
 * caller), so a group's query heads sum. Scratch: s of Tk doubles, o of dv, P of Tq Tk, lse of
 * Tq. */
static void reference_head_backward(const AttnProblem *p, size_t bh, double *s, double *o,
                                    double *P, double *lse, RefGradients *g)
{
    const size_t Tq = p->Tq, Tk = p->Tk, d = p->d, dv = p->dv;
    const RefHead x = ref_head(p, bh);
    double *dq = g->dq + bh * Tq * d, *dk = g->dk + x.kvh * Tk * d, *dvh = g->dv + x.kvh * Tk * dv;
    const double sink = ref_sink(p, bh);
    memset(dq, 0, sizeof(double) * Tq * d);
    for (size_t i = 0; i < Tq; i++) {
        reference_row(p, (int)i, x.q + i * d, x.k, x.v, sink, s, o, &lse[i]);
        for (size_t j = 0; j < Tk; j++)
            P[i * Tk + j] = s[j] != -INFINITY ? exp(s[j] - lse[i]) : 0.0;
    }
    for (size_t i = 0; i < Tq; i++) {
        const float *doi = x.dout + i * dv;
        double D = 0.0; /* P = 0 for the keys the row does not see: they are skipped */
        for (size_t j = 0; j < Tk; j++) {
            if (!test_key_visible(p, (int)i, (int)j))
                continue;
            double dp = 0.0; /* dP_ij = dO_i . v_j */
            for (size_t c = 0; c < dv; c++) {
                dp += (double)doi[c] * x.v[j * dv + c];
                dvh[j * dv + c] += P[i * Tk + j] * doi[c];
            }
            s[j] = dp;
            D += P[i * Tk + j] * dp;
        }
        if (p->sinks && lse[i] != -INFINITY)
            g->dsinks[bh % (size_t)p->Hq] -= exp(sink - lse[i]) * D;
        for (size_t j = 0; j < Tk; j++) {
            if (!test_key_visible(p, (int)i, (int)j))
                continue;
            const double ds = P[i * Tk + j] * (s[j] - D) * p->scale;
            for (size_t c = 0; c < d; c++) {
                dq[i * d + c] += ds * x.k[j * d + c];
                dk[j * d + c] += ds * x.q[i * d + c];
            }
        }
    }
}

int ref_attention_backward(const AttnProblem *p, RefGradients *g)
{
    memset(g, 0, sizeof *g);
    if (!ref_supported(p) || !p->dout)
        return -1;
    const size_t heads = (size_t)p->B * p->Hq, kv_heads = (size_t)p->B * p->Hkv;
    const size_t Tq = p->Tq, Tk = p->Tk;
    g->nq = heads * Tq * p->d;
    g->nk = kv_heads * Tk * p->d;
    g->nv = kv_heads * Tk * p->dv;
    g->dq = malloc(sizeof(double) * (g->nq + 1));
    g->dk = calloc(g->nk + 1, sizeof(double)); /* the group's query heads add into it */
    g->dv = calloc(g->nv + 1, sizeof(double));
    double *s = malloc(sizeof(double) * (Tk + 1));
    double *o = malloc(sizeof(double) * ((size_t)p->dv + 1));
    double *P = malloc(sizeof(double) * (Tq * Tk + 1));
    double *lse = malloc(sizeof(double) * (Tq + 1));
    g->nsinks = p->sinks ? (size_t)p->Hq : 0;
    g->dsinks = p->sinks ? calloc(g->nsinks, sizeof(double)) : NULL; /* summed over (b, i) */
    const int ok = g->dq && g->dk && g->dv && s && o && P && lse && (!p->sinks || g->dsinks);
    for (size_t bh = 0; ok && bh < heads; bh++)
        reference_head_backward(p, bh, s, o, P, lse, g);
    free(s), free(o), free(P), free(lse);
    if (!ok)
        ref_gradients_free(g);
    return ok ? 0 : -1;
}

void ref_gradients_free(RefGradients *g)
{
    free(g->dq), free(g->dk), free(g->dv), free(g->dsinks);
    memset(g, 0, sizeof *g);
}

double element_error(double got, double want, ErrorMeasure m)
{
    if (isnan(got))
        return NAN;
    if (isinf(got) || isinf(want)) /* -inf lse of an empty row: must match exactly */
        return got == want ? 0.0 : INFINITY;
    const double err = fabs(got - want);
    return m == ERR_ABS_REL ? err / (1.0 + fabs(want)) : err;
}

/* worst so far and one more error: NaN once seen stays */
static double worse(double worst, double err)
{
    return err > worst || isnan(err) ? err : worst;
}

double ref_attention_max_error(const AttnProblem *p, const float *o, const float *lse,
                               ErrorMeasure m)
{
    RefAttention ref;
    if (ref_attention(p, &ref) != 0)
        return INFINITY;
    double worst = 0.0;
    for (size_t r = 0; r < ref.rows; r++)
        worst = worse(worst, element_error(lse[r], ref.lse[r], m));
    for (size_t i = 0; i < ref.rows * ref.dv; i++)
        worst = worse(worst, element_error(o[i], ref.o[i], m));
    ref_attention_free(&ref);
    return worst;
}

double ref_gradients_max_error(const AttnProblem *p, const float *dq, const float *dk,
                               const float *dv, ErrorMeasure m)
{
    return ref_gradients_max_error_sinks(p, dq, dk, dv, NULL, m);
}

double ref_gradients_max_error_sinks(const AttnProblem *p, const float *dq, const float *dk,
                                     const float *dv, const float *dsinks, ErrorMeasure m)
{
    RefGradients g;
    if (ref_attention_backward(p, &g) != 0)
        return INFINITY;
    double worst = 0.0;
    for (size_t i = 0; i < g.nq; i++)
        worst = worse(worst, element_error(dq[i], g.dq[i], m));
    for (size_t i = 0; i < g.nk; i++)
        worst = worse(worst, element_error(dk[i], g.dk[i], m));
    for (size_t i = 0; i < g.nv; i++)
        worst = worse(worst, element_error(dv[i], g.dv[i], m));
    for (size_t i = 0; dsinks && i < g.nsinks; i++)
        worst = worse(worst, element_error(dsinks[i], g.dsinks[i], m));
    ref_gradients_free(&g);
    return worst;
}
