/* test_support_mla.c — MLA problems (stage 09, test_support.h): seeded random inputs
 * (test_mla_make) and a float64 reference of y written straight from the definition in
 * docs/conventions.md, "MLA cases" (ref_mla): per head the up-projected query, key and value of
 * every token, a softmax over the keys each row keeps, the output projection. It is the naive
 * form, loop by loop, with nothing absorbed and nothing skipped, so a NaN input reaches exactly
 * the outputs that depend on it. */
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

/* out (n) = a (k) · W[:, h, :], W of shape (k, H, n): the h-th slice of a per-head weight. */
static void times_head(const double *a, int k, const float *W, int H, int h, int n, double *out)
{
    for (int e = 0; e < n; e++) {
        double acc = 0.0;
        for (int c = 0; c < k; c++)
            acc += a[c] * W[((size_t)c * H + h) * n + e];
        out[e] = acc;
    }
}

/* The same for a float vector a. */
static void times_head_f(const float *a, int k, const float *W, int H, int h, int n, double *out)
{
    for (int e = 0; e < n; e++) {
        double acc = 0.0;
        for (int c = 0; c < k; c++)
            acc += (double)a[c] * W[((size_t)c * H + h) * n + e];
        out[e] = acc;
    }
}

/* Rotates the interleaved pairs of x (p values) by pos * theta^(-2t/p). */
static void rope_double(double *x, int p, int pos, double theta)
{
    for (int t = 0; t < p / 2; t++) {
        const double a = pos * pow(theta, -2.0 * t / p), c = cos(a), s = sin(a);
        const double x0 = x[2 * t], x1 = x[2 * t + 1];
        x[2 * t] = x0 * c - x1 * s;
        x[2 * t + 1] = x0 * s + x1 * c;
    }
}

int ref_mla(const MlaProblem *p, double *y)
{
    const int B = p->B, Tq = p->Tq, Tk = p->Tk, D = p->D, mq = p->mq, H = p->H, dh = p->dh, m = p->m;
    const int pe = p->p, dv = p->dv;
    double *c_q = malloc(sizeof(double) * mq), *q_nope = malloc(sizeof(double) * dh);
    double *q_pe = malloc(sizeof(double) * (pe + 1)), *k_nope = malloc(sizeof(double) * dh);
    double *v = malloc(sizeof(double) * (size_t)Tk * dv), *s = malloc(sizeof(double) * Tk);
    double *o = malloc(sizeof(double) * dv);
    const int ok = c_q && q_nope && q_pe && k_nope && v && s && o;
    for (int b = 0; ok && b < B; b++)
        for (int i = 0; i < Tq; i++) {
            const int pos = Tk - Tq + i, seen = p->causal ? pos + 1 : Tk;
            double *yi = y + ((size_t)b * Tq + i) * D;
            const float *x = p->in[MLA_X] + ((size_t)b * Tq + i) * D;
            for (int c = 0; c < mq; c++) { // c_q = x W_dq
                double acc = 0.0;
                for (int e = 0; e < D; e++)
                    acc += (double)x[e] * p->in[MLA_W_DQ][(size_t)e * mq + c];
                c_q[c] = acc;
            }
            for (int e = 0; e < D; e++)
                yi[e] = 0.0;
            for (int h = 0; h < H; h++) {
                times_head(c_q, mq, p->in[MLA_W_UQ], H, h, dh, q_nope);
                times_head(c_q, mq, p->in[MLA_W_QR], H, h, pe, q_pe);
                rope_double(q_pe, pe, pos, p->rope_theta);
                // s_j = (q_nope . k_nope_j + q_pe . kpe_j) * scale over the kept keys; v_j
                for (int j = 0; j < seen; j++) {
                    const float *ckv = p->in[MLA_CKV] + ((size_t)b * Tk + j) * m;
                    const float *kpe = p->in[MLA_KPE] + ((size_t)b * Tk + j) * pe;
                    times_head_f(ckv, m, p->in[MLA_W_UK], H, h, dh, k_nope);
                    times_head_f(ckv, m, p->in[MLA_W_UV], H, h, dv, v + (size_t)j * dv);
                    double dot = 0.0;
                    for (int e = 0; e < dh; e++)
                        dot += q_nope[e] * k_nope[e];
                    for (int e = 0; e < pe; e++)
                        dot += q_pe[e] * kpe[e];
                    s[j] = dot * p->scale;
                }
                // softmax: the max over the scores that are numbers (every row keeps key 0, Tq <= Tk);
                // a NaN score makes l, and so every weight of the row, NaN
                double mx = -INFINITY, l = 0.0;
                for (int j = 0; j < seen; j++)
                    mx = s[j] > mx ? s[j] : mx;
                for (int j = 0; j < seen; j++)
                    l += exp(s[j] - mx);
                for (int e = 0; e < dv; e++) {
                    double acc = 0.0;
                    for (int j = 0; j < seen; j++)
                        acc += exp(s[j] - mx) / l * v[(size_t)j * dv + e];
                    o[e] = acc;
                }
                // y += o_h W_o[h]
                for (int e = 0; e < dv; e++)
                    for (int c = 0; c < D; c++)
                        yi[c] += o[e] * p->in[MLA_W_O][((size_t)h * dv + e) * D + c];
            }
        }
    free(c_q), free(q_nope), free(q_pe), free(k_nope), free(v), free(s), free(o);
    return ok ? 0 : -1;
}
