/* fuzz_magnitude.c — how large the terms are that each attention output adds up (fuzz_check.h,
 * FuzzCheck.magnitude), in float64, for contiguous and paged problems:
 *
 *   o_ic     sum_j P_ij |v_jc|                         lse_i    max_j scale sum_c |q_ic k_jc|, + |sink|
 *   dq_ic    scale sum_j P_ij (A_ij + B_i) |k_jc|      dv_jc    sum_i P_ij |dO_ic|
 *   dk_jc    scale sum_i P_ij (A_ij + B_i) |q_ic|      dsinks_h sum_(b,i) P_sink B_i
 *   with A_ij = sum_c |dO_ic v_jc| (bounds |dP_ij|) and B_i = sum_c |dO_ic| sum_j P_ij |v_jc|
 *   (bounds |D_i|).
 *
 * A float32 sum loses a few roundings of the size of its terms, not of its result: where terms
 * cancel (dS = P (dP - D) is 0 for a row that sees one key, whatever the inputs) the error is of
 * the size of these magnitudes, and no nudge of the inputs shows it. P_ij comes from the
 * reference's lse (exp(s_ij - lse_i)); which keys a row sees is test_key_visible's rule. */
#include <math.h>
#include <string.h>

#include "fuzz_magnitude.h"
#include "test_support.h"

/* Where each output starts in the concatenated reference (attention_reference's order). */
typedef struct {
    size_t o, lse, dq, dk, dv, dsinks, end;
} Layout;

static Layout layout_of(const AttnProblem *p)
{
    const size_t rows = (size_t)p->B * p->Hq * p->Tq, kv = (size_t)p->B * p->Hkv * p->Tk;
    Layout l;
    l.o = 0, l.lse = rows * p->dv, l.dq = l.lse + rows;
    const int grads = p->dout != NULL;
    l.dk = l.dq + (grads ? rows * p->d : 0);
    l.dv = l.dk + (grads ? kv * p->d : 0);
    l.dsinks = l.dv + (grads ? kv * p->dv : 0);
    l.end = l.dsinks + (grads && p->sinks ? (size_t)p->Hq : 0);
    return l;
}

static const float *key_of(const AttnProblem *p, const float *base, int b, int g, int j, int width)
{
    if (p->page_size > 0)
        return test_paged_row(p, base, b, g, j, width);
    return base + (((size_t)b * p->Hkv + g) * p->Tk + j) * width;
}

static double dot(const float *a, const float *b, int n, int absolute)
{
    double s = 0.0;
    for (int c = 0; c < n; c++)
        s += absolute ? fabs((double)a[c] * b[c]) : (double)a[c] * b[c];
    return s;
}

/* One query row: which sequence, head and kv head, its keys, and its lse. */
typedef struct {
    AttnProblem seq; /* p with Tk = the sequence's length, for test_key_visible */
    int b, h, g, i;
    size_t r; /* row index (b, h, i) */
    const float *q, *dout;
    double lse;
} Row;

static double weight(const Row *w, const AttnProblem *p, int j)
{
    if (!test_key_visible(&w->seq, w->i, j))
        return 0.0;
    const float *k = key_of(p, p->k, w->b, w->g, j, p->d);
    return exp(dot(w->q, k, p->d, 0) * p->scale - w->lse);
}

/* o and lse magnitudes of the row; returns B_i (0 without dO). */
static double row_forward(const AttnProblem *p, const Row *w, const Layout *l, double *mag)
{
    double *o = mag + l->o + w->r * p->dv, *lse = mag + l->lse + w->r, B = 0.0;
    *lse = p->sinks ? fabs((double)p->sinks[w->h]) : 0.0;
    for (int j = 0; j < w->seq.Tk; j++) {
        const float *k = key_of(p, p->k, w->b, w->g, j, p->d), *v = key_of(p, p->v, w->b, w->g, j, p->dv);
        const double size = dot(w->q, k, p->d, 1) * fabs((double)p->scale), P = weight(w, p, j);
        *lse = size > *lse ? size : *lse;
        for (int c = 0; P > 0.0 && c < p->dv; c++)
            o[c] += P * fabs((double)v[c]);
    }
    for (int c = 0; w->dout && c < p->dv; c++)
        B += fabs((double)w->dout[c]) * o[c];
    return B;
}

/* The row's share of the gradient magnitudes. */
static void row_backward(const AttnProblem *p, const Row *w, double B, const Layout *l, double *mag)
{
    for (int j = 0; j < w->seq.Tk; j++) {
        const double P = weight(w, p, j);
        if (P == 0.0)
            continue;
        const float *k = key_of(p, p->k, w->b, w->g, j, p->d), *v = key_of(p, p->v, w->b, w->g, j, p->dv);
        const double ds = P * (dot(w->dout, v, p->dv, 1) + B) * fabs((double)p->scale);
        const size_t key = ((size_t)w->b * p->Hkv + w->g) * p->Tk + j;
        for (int c = 0; c < p->d; c++) {
            mag[l->dq + w->r * p->d + c] += ds * fabs((double)k[c]);
            mag[l->dk + key * p->d + c] += ds * fabs((double)w->q[c]);
        }
        for (int c = 0; c < p->dv; c++)
            mag[l->dv + key * p->dv + c] += P * fabs((double)w->dout[c]);
    }
    if (p->sinks)
        mag[l->dsinks + w->h] += exp(p->sinks[w->h] - w->lse) * B;
}

void fuzz_attention_magnitude(const void *problem, const double *ref, double *mag)
{
    const AttnProblem *p = problem;
    const Layout l = layout_of(p);
    memset(mag, 0, sizeof(double) * l.end);
    Row w;
    w.seq = *p;
    for (w.b = 0; w.b < p->B; w.b++)
        for (w.h = 0; w.h < p->Hq; w.h++)
            for (w.i = 0; w.i < p->Tq; w.i++) {
                w.seq.Tk = p->page_size > 0 ? p->seq_lens[w.b] : p->Tk;
                w.g = w.h / (p->Hq / p->Hkv);
                w.r = ((size_t)w.b * p->Hq + w.h) * p->Tq + w.i;
                w.q = p->q + w.r * p->d;
                w.dout = p->dout ? p->dout + w.r * p->dv : NULL;
                w.lse = ref[l.lse + w.r];
                const double B = row_forward(p, &w, &l, mag);
                if (w.dout && isfinite(w.lse))
                    row_backward(p, &w, B, &l, mag);
            }
}
