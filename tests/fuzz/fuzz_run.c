/* fuzz_run.c — fuzz_run_case (fuzz_support.h): a loaded case through its stage, every output
 * poisoned with NaN first, then compared with its float64 reference by fuzz_check. The references
 * are tests/test_support*.c's (contiguous and paged attention, gradients, MLA). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fuzz_check.h"
#include "fuzz_magnitude.h"
#include "fuzz_support.h"
#include "kind_mla.h"
#include "runner.h"
#include "test_support.h"

/* ---- which inputs hold NaN or Inf ---------------------------------------------------------- */

static int any_nonfinite(const float *x, size_t n)
{
    for (size_t i = 0; x && i < n; i++)
        if (!isfinite(x[i]))
            return 1;
    return 0;
}

/* Of a paged cache only the slots some sequence uses count: the others may hold anything (the
 * golden cases fill them with NaN) and must not reach the outputs. */
static int paged_pool_nonfinite(const AttnProblem *p, const float *pool, int width)
{
    for (int b = 0; b < p->B; b++)
        for (int j = 0; j < p->seq_lens[b]; j++)
            for (int h = 0; h < p->Hkv; h++)
                if (any_nonfinite(test_paged_row(p, pool, b, h, j, width), (size_t)width))
                    return 1;
    return 0;
}

static size_t rows_of(const AttnProblem *p) { return (size_t)p->B * p->Hq * p->Tq; }

static int attention_nonfinite(const AttnProblem *p)
{
    int bad = any_nonfinite(p->q, rows_of(p) * p->d) || any_nonfinite(p->sinks, (size_t)p->Hq) ||
              any_nonfinite(p->dout, rows_of(p) * p->dv);
    if (p->page_size > 0)
        return bad || paged_pool_nonfinite(p, p->k, p->d) || paged_pool_nonfinite(p, p->v, p->dv);
    return bad || any_nonfinite(p->k, attn_k_numel(p)) || any_nonfinite(p->v, attn_v_numel(p));
}

/* ---- how large the scores get ---------------------------------------------------------------- */

/* Key j of kv head g of sequence b (contiguous, or through the block table). */
static const float *key_row(const AttnProblem *p, int b, int g, int j)
{
    if (p->page_size > 0)
        return test_paged_row(p, p->k, b, g, j, p->d);
    return p->k + (((size_t)b * p->Hkv + g) * p->Tk + j) * p->d;
}

/* The largest scale sum_c |q_ic k_jc| over every query row and every key of its sequence and kv
 * head, and the largest |sink|: what the scores' float32 rounding scales with. */
static double score_magnitude(const AttnProblem *p)
{
    double largest = 0.0;
    for (int h = 0; p->sinks && h < p->Hq; h++)
        largest = fabs((double)p->sinks[h]) > largest ? fabs((double)p->sinks[h]) : largest;
    for (int b = 0; b < p->B; b++)
        for (int h = 0; h < p->Hq; h++)
            for (int i = 0; i < p->Tq; i++) {
                const float *q = p->q + (((size_t)b * p->Hq + h) * p->Tq + i) * p->d;
                const int keys = p->page_size > 0 ? p->seq_lens[b] : p->Tk;
                for (int j = 0; j < keys; j++) {
                    const float *k = key_row(p, b, h / (p->Hq / p->Hkv), j);
                    double size = 0.0;
                    for (int c = 0; c < p->d; c++)
                        size += fabs((double)q[c] * k[c]);
                    size *= fabs((double)p->scale);
                    largest = size > largest ? size : largest; /* NaN stays out */
                }
            }
    return largest;
}

/* ---- references in the layout of the outputs ------------------------------------------------- */

static double *append(double *out, const double *x, size_t n)
{
    if (n)
        memcpy(out, x, sizeof(double) * n);
    return out + n;
}

/* o, lse, then with dO: dq, dk, dv and, with sinks, dsinks. */
static int attention_reference(const void *problem, double *out)
{
    const AttnProblem *p = problem;
    RefAttention r;
    if (ref_attention(p, &r) != 0)
        return -1;
    out = append(out, r.o, r.rows * r.dv);
    out = append(out, r.lse, r.rows);
    ref_attention_free(&r);
    if (!p->dout)
        return 0;
    RefGradients g;
    if (ref_attention_backward(p, &g) != 0)
        return -1;
    out = append(out, g.dq, g.nq);
    out = append(out, g.dk, g.nk);
    out = append(out, g.dv, g.nv);
    append(out, g.dsinks, g.nsinks);
    ref_gradients_free(&g);
    return 0;
}

static int mla_reference_of(const void *problem, double *out) { return ref_mla(problem, out); }

static void mla_magnitude(const void *problem, const double *ref, double *mag)
{
    const MlaProblem *p = problem;
    double *y = malloc(sizeof(double) * (mla_numel(p, MLA_INPUT_COUNT) + 1));
    (void)ref;
    if (!y || ref_mla_full(p, y, mag, NULL) != 0)
        fuzz_fail("out of memory for the MLA magnitudes");
    free(y);
}

/* ---- attention and paged cases ------------------------------------------------------------- */

typedef struct {
    Tensor t[OUT_COUNT];
    AttnTensors out;
} Outputs;

static void outputs_make(const AttnProblem *p, Outputs *o)
{
    float **slot[OUT_COUNT] = {&o->out.o, &o->out.lse, &o->out.dq, &o->out.dk, &o->out.dv, &o->out.dsinks};
    memset(o, 0, sizeof *o);
    for (int id = 0; id < OUT_COUNT; id++) {
        if (!output_present(p, (OutputId)id))
            continue;
        int64_t shape[TENSOR_MAX_DIMS];
        const int ndim = output_shape(p, (OutputId)id, shape);
        if (tensor_alloc_poisoned(&o->t[id], ndim, shape) != 0)
            fuzz_fail("out of memory for %s", output_file_name((OutputId)id));
        *slot[id] = o->t[id].data;
    }
}

static void outputs_free(Outputs *o)
{
    for (int id = 0; id < OUT_COUNT; id++)
        tensor_free(&o->t[id]);
}

/* The comparison of a run of p (a copy the nudges may repoint) against attention_reference. */
static void check_attention(const Case *c, AttnProblem *p, const Outputs *o, const FuzzRunOptions *run)
{
    static const char *const names[OUT_COUNT] = {"o", "lse", "dq", "dk", "dv", "dsinks"};
    FuzzCheck k = {0};
    char what[400];
    snprintf(what, sizeof what,
             "%s (stage %s; B=%d Hq=%d Hkv=%d Tq=%d Tk=%d d=%d dv=%d causal=%d window=%d "
             "sink_tokens=%d scale=%g sinks=%d dO=%d page_size=%d; run: sram_kib=%d block_r=%d "
             "block_c=%d splits=%d)",
             c->is_paged ? "paged case" : "attention case", c->is_paged ? "11" : "10", p->B, p->Hq,
             p->Hkv, p->Tq, p->Tk, p->d, p->dv, p->causal, p->window, p->sink_tokens, p->scale,
             p->sinks != NULL, p->dout != NULL, p->page_size, run->sram_kib, run->block_r,
             run->block_c, run->splits);
    k.what = what;
    for (int id = 0; id < OUT_COUNT; id++)
        if (o->t[id].data)
            k.out[k.nout++] = (FuzzOutput){names[id], o->t[id].data, tensor_numel(&o->t[id]),
                                           id >= OUT_DQ ? CHECK_TOL_BWD : CHECK_TOL_FWD};
    k.in[k.nin++] = (FuzzInput){&p->q, rows_of(p) * p->d};
    k.in[k.nin++] = (FuzzInput){&p->k, attn_k_numel(p)};
    k.in[k.nin++] = (FuzzInput){&p->v, attn_v_numel(p)};
    if (p->dout)
        k.in[k.nin++] = (FuzzInput){&p->dout, rows_of(p) * p->dv};
    if (p->sinks)
        k.in[k.nin++] = (FuzzInput){&p->sinks, (size_t)p->Hq};
    k.reference = attention_reference;
    k.problem = p;
    k.nonfinite_inputs = attention_nonfinite(p);
    const int longest = p->d + p->dv + p->Tk + p->Hq / p->Hkv * p->Tq; /* dK sums Tq rows per head */
    k.eta = fuzz_eta(longest);
    k.score_error = fuzz_score_error(p->d, score_magnitude(p));
    k.magnitude = fuzz_attention_magnitude;
    k.kappa = fuzz_kappa(longest, k.score_error);
    fuzz_check(&k);
}

static void run_attention(const Case *c, const FuzzRunOptions *opts)
{
    AttnProblem p = c->problem;
    const StageImpl *impl = fuzz_stage(c->is_paged ? "11" : "10");
    Outputs o;
    outputs_make(&p, &o);
    const RunCtx ctx = fuzz_run_ctx(opts);
    FlError err = {{0}};
    const int rc = runner_run(impl, p.dout ? DIR_BWD : DIR_FWD, &p, &o.out, &ctx, NULL, &err);
    if (fuzz_run_accepted(c->is_paged ? "stage 11" : "stage 10", rc, &err, opts))
        check_attention(c, &p, &o, opts);
    outputs_free(&o);
}

/* ---- MLA cases (the problem as the MLA kind loaded it, kind_mla.h) ----------------------------------------------------------------------------- */

static void run_mla(const MlaProblem *problem, const FuzzRunOptions *opts)
{
    MlaProblem p = *problem;
    const StageImpl *impl = fuzz_stage("09");
    const size_t ny = mla_numel(&p, MLA_INPUT_COUNT);
    float *y = malloc(sizeof(float) * (ny + 1));
    if (!y)
        fuzz_fail("out of memory for y");
    for (size_t i = 0; i < ny; i++)
        y[i] = NAN;
    const RunCtx ctx = fuzz_run_ctx(opts);
    FlError err = {{0}};
    const int rc = mla_run(impl, &p, y, &ctx, NULL, &err);
    if (fuzz_run_accepted("stage 09", rc, &err, opts)) {
        FuzzCheck k = {0};
        char what[320];
        snprintf(what, sizeof what,
                 "MLA case (stage 09; B=%d Tq=%d Tk=%d D=%d mq=%d H=%d dh=%d m=%d p=%d dv=%d causal=%d "
                 "rope_theta=%g; run: sram_kib=%d block_r=%d block_c=%d)",
                 p.B, p.Tq, p.Tk, p.D, p.mq, p.H, p.dh, p.m, p.p, p.dv, p.causal, p.rope_theta,
                 opts->sram_kib, opts->block_r, opts->block_c);
        k.what = what;
        k.out[k.nout++] = (FuzzOutput){"y", y, ny, CHECK_TOL_FWD};
        for (int id = 0; id < MLA_INPUT_COUNT; id++) {
            k.in[k.nin++] = (FuzzInput){&p.in[id], mla_numel(&p, id)};
            k.nonfinite_inputs = k.nonfinite_inputs || any_nonfinite(p.in[id], mla_numel(&p, id));
        }
        k.reference = mla_reference_of;
        k.problem = &p;
        const int longest = p.D + p.mq + p.m + p.dh + p.p + p.dv + p.H * p.dv + p.Tk;
        k.eta = fuzz_eta(longest);
        double scores = 0.0, *ref = malloc(sizeof(double) * (ny + 1));
        if (!ref || ref_mla_full(&p, ref, NULL, &scores) != 0)
            fuzz_fail("out of memory for the MLA reference");
        free(ref);
        k.score_error = fuzz_score_error(p.D + p.mq + p.m + p.dh + p.p, scores);
        k.magnitude = mla_magnitude;
        k.kappa = fuzz_kappa(longest, k.score_error);
        fuzz_check(&k);
    }
    free(y);
}

void fuzz_run_case(const Case *c, const FuzzRunOptions *opts)
{
    const MlaProblem *mla = mla_case_problem(c);
    if (mla)
        run_mla(mla, opts);
    else
        run_attention(c, opts);
}

int fuzz_load(const char *dir, int must_refuse, const char *damage, Case *c)
{
    FlError err = {{0}};
    const int rc = case_load(dir, 0, c, &err);
    if (rc != FL_OK) {
        fuzz_expect_refusal("case_load", rc, &err);
        return 0;
    }
    if (must_refuse) {
        case_free(c);
        fuzz_fail("case_load accepted a case whose %s was damaged", damage);
    }
    return 1;
}
