/* test_support_mla.c — MLA problems (stage 09, test_support.h): seeded random inputs
 * (test_mla_make) and a float64 reference of y written straight from the definition in
 * docs/conventions.md, "MLA cases" (ref_mla, ref_mla_full): per head the up-projected query, key
 * and value of every token, a softmax over the keys each row keeps, the output projection. It is
 * the naive form, loop by loop, with nothing absorbed, so a NaN input reaches exactly the outputs
 * that depend on it. The tests and the fuzzers share it. */
#include "test_support.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void test_mla_free(TestMla *x)
{
    for (int id = 0; id < MLA_INPUT_COUNT; id++)
        free(x->in[id]);
    memset(x, 0, sizeof *x);
}

int test_mla_make(TestMla *x, const TestMlaShape *s, uint64_t seed)
{
    memset(x, 0, sizeof *x);
    MlaProblem *p = &x->p;
    p->B = s->B, p->Tq = s->Tq, p->Tk = s->Tk, p->D = s->D, p->mq = s->mq, p->H = s->H, p->dh = s->dh;
    p->m = s->m, p->p = s->p, p->dv = s->dv, p->causal = s->causal, p->rope_theta = 10000.0f;
    p->scale = 1.0f / sqrtf((float)(s->dh + s->p));
    Rng rng;
    rng_seed(&rng, seed);
    for (int id = 0; id < MLA_INPUT_COUNT; id++) {
        const size_t n = mla_numel(p, id);
        x->in[id] = malloc(n * sizeof(float));
        if (!x->in[id]) {
            test_mla_free(x);
            return -1;
        }
        rng_fill_normal(&rng, x->in[id], n, id <= MLA_KPE ? 1.0f : 0.2f);
        p->in[id] = x->in[id];
    }
    return 0;
}


/* ---- the float64 reference (test_support.h, ref_mla) ----------------------------------------
 *
 * For batch b, query row i (position pos = Tk - Tq + i) and head h:
 *   c_q    = x[b,i] W_dq                                  (mq)
 *   q_nope = c_q W_uq[:,h,:]                              (dh)
 *   q_pe   = rope(c_q W_qr[:,h,:], pos)                   (p)   interleaved pairs
 *   s_j    = (q_nope . ckv[b,j] W_uk[:,h,:] + q_pe . kpe[b,j]) * scale    keys j <= pos if causal
 *   o      = sum_j softmax(s)_j ckv[b,j] W_uv[:,h,:]     (dv)
 *   y[b,i] += o W_o[h]                                    (D) */

/* out (width) = row (n) times the columns [offset, offset + width) of w, a row-major (n, stride)
 * matrix: the h-th slice W[:, h, :] of a (n, H, width) weight has stride H width, offset h width.
 * With absolute set, every product is taken in absolute value: the size of the terms out adds up. */
static void project_terms(const double *row, int n, const float *w, int stride, int offset, int width,
                          int absolute, double *out)
{
    for (int c = 0; c < width; c++)
        out[c] = 0.0;
    for (int r = 0; r < n; r++)
        for (int c = 0; c < width; c++) {
            const double t = row[r] * (double)w[(size_t)r * stride + offset + c];
            out[c] += absolute ? fabs(t) : t;
        }
}

static void project(const double *row, int n, const float *w, int stride, int offset, int width, double *out)
{
    project_terms(row, n, w, stride, offset, width, 0, out);
}

static void widen(const float *x, int n, double *out)
{
    for (int i = 0; i < n; i++)
        out[i] = x[i];
}

/* Turns pair t of x (p wide) by pos theta^(-2t/p). */
static void rope(double *x, int p, int pos, double theta)
{
    for (int t = 0; t < p / 2; t++) {
        const double a = pos * pow(theta, -2.0 * t / p), c = cos(a), s = sin(a);
        const double x0 = x[2 * t], x1 = x[2 * t + 1];
        x[2 * t] = x0 * c - x1 * s;
        x[2 * t + 1] = x0 * s + x1 * c;
    }
}

typedef struct {
    double *cq, *qn, *qr, *lat, *kn, *val, *s, *o; /* scratch of one (row, head) */
    double *val_abs, *o_abs; /* the sizes of the terms of val and o */
    double largest; /* the largest scale * (sum |q_nope k_nope| + sum |q_pe kpe|) so far */
} Scratch;

static int scratch_make(const MlaProblem *p, Scratch *w)
{
    const size_t widest = (size_t)p->D + p->mq + p->m + p->dh + p->p + p->dv + 1;
    w->cq = malloc(sizeof(double) * (size_t)(p->mq + 1));
    w->qn = malloc(sizeof(double) * (size_t)(p->dh + 1));
    w->qr = malloc(sizeof(double) * (size_t)(p->p + 1));
    w->lat = malloc(sizeof(double) * widest);
    w->kn = malloc(sizeof(double) * (size_t)(p->dh + 1));
    w->val = malloc(sizeof(double) * (size_t)p->Tk * (p->dv + 1));
    w->s = malloc(sizeof(double) * (size_t)(p->Tk + 1));
    w->o = malloc(sizeof(double) * (size_t)(p->dv + 1));
    w->val_abs = malloc(sizeof(double) * (size_t)p->Tk * (p->dv + 1));
    w->o_abs = malloc(sizeof(double) * (size_t)(p->dv + 1));
    return w->cq && w->qn && w->qr && w->lat && w->kn && w->val && w->s && w->o && w->val_abs && w->o_abs
               ? 0
               : -1;
}

static void scratch_free(Scratch *w)
{
    free(w->cq), free(w->qn), free(w->qr), free(w->lat), free(w->kn), free(w->val), free(w->s),
        free(w->o), free(w->val_abs), free(w->o_abs);
}

/* Scores s_j and values (into w->val) of keys j < keys for head h of batch b. */
static void head_keys(const MlaProblem *p, int b, int h, int keys, Scratch *w)
{
    const float *ckv = p->in[MLA_CKV], *kpe = p->in[MLA_KPE];
    for (int j = 0; j < keys; j++) {
        const size_t key = (size_t)b * p->Tk + j;
        widen(ckv + key * p->m, p->m, w->lat);
        project(w->lat, p->m, p->in[MLA_W_UK], p->H * p->dh, h * p->dh, p->dh, w->kn);
        project(w->lat, p->m, p->in[MLA_W_UV], p->H * p->dv, h * p->dv, p->dv, w->val + (size_t)j * p->dv);
        project_terms(w->lat, p->m, p->in[MLA_W_UV], p->H * p->dv, h * p->dv, p->dv, 1, w->val_abs + (size_t)j * p->dv);
        double dot = 0.0, size = 0.0;
        for (int c = 0; c < p->dh; c++) {
            dot += w->qn[c] * w->kn[c];
            size += fabs(w->qn[c] * w->kn[c]);
        }
        for (int c = 0; c < p->p; c++) {
            dot += w->qr[c] * (double)kpe[key * p->p + c];
            size += fabs(w->qr[c] * (double)kpe[key * p->p + c]);
        }
        w->s[j] = dot * (double)p->scale;
        if (size * p->scale > w->largest) /* NaN stays out */
            w->largest = size * p->scale;
    }
}

/* o = softmax(s) V over keys j < keys (a NaN score makes o NaN, as it must). */
static void head_output(const MlaProblem *p, int keys, Scratch *w)
{
    double m = -INFINITY, l = 0.0;
    for (int j = 0; j < keys; j++)
        m = w->s[j] > m ? w->s[j] : m;
    for (int j = 0; j < keys; j++)
        l += exp(w->s[j] - m);
    for (int c = 0; c < p->dv; c++)
        w->o[c] = w->o_abs[c] = 0.0;
    for (int j = 0; j < keys; j++) {
        const double weight = exp(w->s[j] - m) / l;
        for (int c = 0; c < p->dv; c++) {
            w->o[c] += weight * w->val[(size_t)j * p->dv + c];
            w->o_abs[c] += weight * w->val_abs[(size_t)j * p->dv + c];
        }
    }
}

/* Adds head h's share o W_o[h] of row i of batch b to y_row (D), and the sizes of its terms to
 * mag_row (D) when that is not NULL. */
static void row_head(const MlaProblem *p, int b, int i, int h, Scratch *w, double *y_row, double *mag_row)
{
    const int pos = p->Tk - p->Tq + i, keys = p->causal ? pos + 1 : p->Tk;
    project(w->cq, p->mq, p->in[MLA_W_UQ], p->H * p->dh, h * p->dh, p->dh, w->qn);
    project(w->cq, p->mq, p->in[MLA_W_QR], p->H * p->p, h * p->p, p->p, w->qr);
    rope(w->qr, p->p, pos, (double)p->rope_theta);
    head_keys(p, b, h, keys, w);
    head_output(p, keys, w);
    const float *w_o = p->in[MLA_W_O] + (size_t)h * p->dv * p->D;
    for (int e = 0; e < p->dv; e++)
        for (int c = 0; c < p->D; c++) {
            y_row[c] += w->o[e] * (double)w_o[(size_t)e * p->D + c];
            if (mag_row)
                mag_row[c] += fabs(w->o_abs[e] * (double)w_o[(size_t)e * p->D + c]);
        }
}

int ref_mla(const MlaProblem *p, double *y) { return ref_mla_full(p, y, NULL, NULL); }

int ref_mla_full(const MlaProblem *p, double *y, double *y_mag, double *score_magnitude)
{
    Scratch w = {0};
    if (scratch_make(p, &w) != 0) {
        scratch_free(&w);
        return -1;
    }
    for (int b = 0; b < p->B; b++)
        for (int i = 0; i < p->Tq; i++) {
            const size_t row = (size_t)b * p->Tq + i;
            double *y_row = y + row * p->D, *mag_row = y_mag ? y_mag + row * p->D : NULL;
            memset(y_row, 0, sizeof(double) * (size_t)p->D);
            if (mag_row)
                memset(mag_row, 0, sizeof(double) * (size_t)p->D);
            widen(p->in[MLA_X] + row * p->D, p->D, w.lat);
            project(w.lat, p->D, p->in[MLA_W_DQ], p->mq, 0, p->mq, w.cq);
            for (int h = 0; h < p->H; h++)
                row_head(p, b, i, h, &w, y_row, mag_row);
        }
    scratch_free(&w);
    if (score_magnitude)
        *score_magnitude = w.largest;
    return 0;
}

uint64_t test_mla_block_keys(const MlaProblem *p, uint64_t r0, uint64_t rows)
{
    return p->causal ? (uint64_t)(p->Tk - p->Tq) + (r0 + rows - 1) / (uint64_t)p->H + 1 : (uint64_t)p->Tk;
}
