/* test_nonfinite.c — the rule for non-finite inputs (docs/conventions.md, "Non-finite values"),
 * on every registered implementation of one device: outputs carry NaN faithfully. One NaN is
 * planted in one input at a time, and every output element is compared with the float64
 * reference of the same inputs (tests/test_support.h), which lets the NaN reach exactly the
 * elements that depend on it:
 *   - where the reference is NaN the output must be NaN (no finite value made from a NaN);
 *   - everywhere else the output must match the reference within the stage's tolerance
 *     (common/check.h check_tolerance), so it is finite (or the -inf lse of a row that sees no key);
 *   - except that an implementation may also give NaN where the reference is finite, but only
 *     inside the planted NaN's own group: the same sequence b and the same kv head (MLA: the same
 *     sequence). A tile product masks by multiplying with P = 0, and 0 x NaN is NaN, so a NaN
 *     reaches the rows of its tile that do not keep it. It may never reach another sequence or
 *     head group.
 * The same problems with no NaN planted must give outputs that match everywhere: finite inputs,
 * finite outputs.
 *
 * Attention stages run small problems with the features each supports (causal with empty rows,
 * GQA, window + sink tokens + learned sinks), forward and, where the stage has one, backward,
 * with NaN planted in q, k, v, do and sinks; CPU stages also with 4 x 4 tiles, so that masks cross
 * tiles and tiles are skipped. Stage 12 (bf16) runs d = 64, stage 13 two ranks. Stage 11 also runs
 * paged caches (NaN in q and in a used slot of a k and a v page; the unused slots hold NaN as in
 * the golden cases) with one, three and its own number of splits. Stage 09 runs MLA problems with
 * NaN in each of its nine inputs, against the naive float64 form (ref_mla).
 *
 * Usage: test_nonfinite cpu|cuda [STAGE]   (cuda: exit 77 without a CUDA device). With a STAGE
 * ("07") only that stage's implementations run, and every wrong element of every run is shown. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "check.h"
#include "kind_mla.h"
#include "runner.h"
#include "test_support.h"

enum { MAX_SHOWN = 6, MAX_RUNS_SHOWN = 40 }; /* wrong elements per run, runs per implementation */
static int verbose; /* one stage asked for: every wrong element of every run */

/* ---- comparing one output with its reference ------------------------------------------------ */

typedef struct {
    const char *stage_label; /* "stage 07 causal (naive, cpu)" */
    char run[256];           /* what ran: problem, planted NaN, tiles */
    int runs, failed_runs;
    int shown_runs;         /* runs whose failures were printed */
    size_t spread_elements; /* elements NaN by spread inside the NaN's group, over all runs */
} Report;

/* The group a NaN was planted in: sequence b and kv head g, -1 where it reaches every one (a
 * learned sink is one head's in every sequence; an MLA weight is every sequence's). */
typedef struct {
    int b, g;
} Group;
static const Group NO_GROUP = {-2, -2}; /* no NaN planted: nothing may spread */

/* Where an output tensor keeps the sequence and the head: the index (0..3) of each in its dims, -1
 * for none, and how many heads share a kv head (heads / group = kv head). */
typedef struct {
    int b_axis, h_axis, group;
} Axes;

static int in_group(const size_t idx[4], Axes a, Group plant)
{
    if (plant.b == -2)
        return 0;
    const int b = a.b_axis < 0 ? -1 : (int)idx[a.b_axis];
    const int g = a.h_axis < 0 ? -1 : (int)idx[a.h_axis] / a.group;
    return (plant.b < 0 || b < 0 || b == plant.b) && (plant.g < 0 || g < 0 || g == plant.g);
}

/* Checks n elements of got (named name, of shape dims[0..3], printed as an index) against want:
 * NaN where want is NaN, else element_error <= tol, or NaN inside the planted NaN's group. Returns the number of wrong elements and prints the first few. */
static size_t compare(Report *r, const char *name, const float *got, const double *want, size_t n,
                      const int dims[4], Axes axes, Group plant, double tol)
{
    size_t wrong = 0;
    for (size_t e = 0; e < n; e++) {
        size_t idx[4], rest = e;
        for (int a = 3; a >= 0; a--) {
            const size_t dim = dims[a] > 0 ? (size_t)dims[a] : 1;
            idx[a] = rest % dim, rest /= dim;
        }
        if (isnan(want[e]) ? isnan(got[e]) : element_error(got[e], want[e], ERR_ABS_REL) <= tol)
            continue;
        if (isnan(got[e]) && in_group(idx, axes, plant)) {
            r->spread_elements++;
            continue;
        }
        if (verbose || (wrong < MAX_SHOWN && r->shown_runs < MAX_RUNS_SHOWN))
            fprintf(stderr, "  %s %s[%zu, %zu, %zu, %zu] = %g, reference %g%s\n", r->run, name, idx[0],
                    idx[1], idx[2], idx[3], got[e], want[e],
                    isnan(want[e])  ? " (depends on the NaN: must be NaN)"
                    : isnan(got[e]) ? " (outside the NaN's sequence and kv head: must not be NaN)"
                                    : "");
        wrong++;
    }
    return wrong;
}

/* ---- attention problems ----------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int B, Hq, Hkv, Tq, Tk, d, dv;
    int causal, window, sink_tokens, sinks;
} AttnConfig;

/* d = 0: the stage's head dim (8 and dv = 6, or the first head dim of a stage that runs only some). */
static const AttnConfig attn_configs[] = {
    {"plain", 2, 2, 2, 5, 7, 0, 0, 0, 0, 0, 0},
    {"causal_tq_gt_tk", 1, 2, 2, 9, 6, 0, 0, 1, 0, 0, 0},      /* rows 0..2 see no key */
    {"causal_t13", 1, 1, 1, 13, 13, 0, 0, 1, 0, 0, 0},
    {"gqa3_causal", 2, 6, 2, 7, 11, 0, 0, 1, 0, 0, 0},
    {"causal_t70", 1, 2, 1, 70, 70, 0, 0, 1, 0, 0, 0},         /* more than one GPU tile */
    {"window_sinks", 1, 4, 2, 10, 13, 0, 0, 1, 3, 2, 1},
    {"sinks_causal_tq_gt_tk", 1, 2, 1, 12, 5, 0, 0, 1, 0, 0, 1}, /* rows 0..6 empty, with a sink */
    {"window_tq_gt_tk", 1, 2, 2, 12, 7, 0, 0, 1, 2, 0, 0},
};

typedef enum { IN_NONE, IN_Q, IN_K, IN_V, IN_DO, IN_SINKS, IN_COUNT } Input;
static const char *const input_names[IN_COUNT] = {"none", "q", "k", "v", "do", "sinks"};

/* Where to plant: element `which` of PLANTS spread over the tensor (first, middle, last, a seeded
 * one). With a causal mask the last key is one that most rows do not see. */
enum { PLANTS = 4 };
static size_t plant_index(size_t n, int which, uint64_t salt)
{
    if (which == 0)
        return 0;
    if (which == 1)
        return n / 2;
    if (which == 2)
        return n - 1;
    uint64_t z = salt * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    z ^= z >> 31, z *= 0xBF58476D1CE4E5B9ull, z ^= z >> 29;
    return (size_t)(z % n);
}

typedef struct {
    int block;  /* 0: the stage's tiles; > 0: Br = Bc = block (CPU) */
    int ranks;  /* stage 13 */
    int splits; /* stage 11: 0 = its own choice */
} RunOpts;

static RunCtx run_ctx(const RunOpts *o)
{
    RunCtx c;
    memset(&c, 0, sizeof c);
    c.threads = 2;
    c.block_r = c.block_c = o->block;
    c.ranks = o->ranks;
    c.splits = o->splits;
    return c;
}

/* One run of impl on x (dir), compared element by element with the reference. 1 when wrong,
 * 0 when right, -1 when the stage refused to run (rc in *rc). */
static int check_attention_run(Report *r, const StageImpl *impl, Direction dir, const AttnProblem *p,
                               AttnTensors *t, const RunOpts *o, Group plant, int *rc_out, FlError *err)
{
    RunCtx ctx = run_ctx(o);
    RunStats stats;
    const int rc = runner_run(impl, dir, p, t, &ctx, &stats, err);
    *rc_out = rc;
    if (rc != FL_OK)
        return -1;
    const double tol_f = check_tolerance(impl->precision, 0), tol_b = check_tolerance(impl->precision, 1);
    size_t wrong = 0;
    RefAttention ref;
    if (ref_attention(p, &ref) != 0) {
        fprintf(stderr, "  %s: the reference failed (out of memory?)\n", r->run);
        return 1;
    }
    const int o_dims[4] = {p->B, p->Hq, p->Tq, p->dv}, lse_dims[4] = {1, p->B, p->Hq, p->Tq};
    const int G = p->Hq / p->Hkv;
    const Axes q_axes = {0, 1, G}, lse_axes = {1, 2, G}, kv_axes = {0, 1, 1}, sink_axes = {-1, 3, G};
    wrong += compare(r, "o", t->o, ref.o, ref.rows * ref.dv, o_dims, q_axes, plant, tol_f);
    wrong += compare(r, "lse", t->lse, ref.lse, ref.rows, lse_dims, lse_axes, plant, tol_f);
    ref_attention_free(&ref);
    if (dir == DIR_BWD) {
        RefGradients g;
        if (ref_attention_backward(p, &g) != 0) {
            fprintf(stderr, "  %s: the gradient reference failed\n", r->run);
            return 1;
        }
        const int q_dims[4] = {p->B, p->Hq, p->Tq, p->d}, k_dims[4] = {p->B, p->Hkv, p->Tk, p->d};
        const int v_dims[4] = {p->B, p->Hkv, p->Tk, p->dv}, s_dims[4] = {1, 1, 1, p->Hq};
        wrong += compare(r, "dq", t->dq, g.dq, g.nq, q_dims, q_axes, plant, tol_b);
        wrong += compare(r, "dk", t->dk, g.dk, g.nk, k_dims, kv_axes, plant, tol_b);
        wrong += compare(r, "dv", t->dv, g.dv, g.nv, v_dims, kv_axes, plant, tol_b);
        if (p->sinks)
            wrong += compare(r, "dsinks", t->dsinks, g.dsinks, g.nsinks, s_dims, sink_axes, plant, tol_b);
        ref_gradients_free(&g);
    }
    if (wrong) {
        fprintf(stderr, "  %s: %zu wrong element(s)\n", r->run, wrong);
        r->shown_runs++;
    }
    return wrong ? 1 : 0;
}

/* The head dims impl runs: 8 and dv 6 unless it names its own (stage 12: 64). */
static void head_dims(const StageImpl *impl, int *d, int *dv)
{
    *d = 8, *dv = 6;
    if (impl->head_dims[0] > 0)
        *d = *dv = impl->head_dims[0];
}

/* The group of element `at` of input `in` (q, k, v, do: B, heads, T, width; sinks: Hq). */
static Group attention_group(const AttnProblem *p, Input in, size_t at)
{
    const int G = p->Hq / p->Hkv;
    if (in == IN_SINKS)
        return (Group){-1, (int)at / G};
    const int kv = in == IN_K || in == IN_V, heads = kv ? p->Hkv : p->Hq;
    const size_t rows = (size_t)(kv ? p->Tk : p->Tq), width = (size_t)(in == IN_Q || in == IN_K ? p->d : p->dv);
    const size_t head = at / (rows * width); /* b * heads + h */
    return (Group){(int)(head / (size_t)heads), (int)(head % (size_t)heads) / (kv ? 1 : G)};
}

/* Every planted NaN of one config on impl with one set of options. Returns failed runs, or -1
 * when the stage refused the options (a tile size it does not take). */
static int attention_config(Report *r, const StageImpl *impl, const AttnConfig *c, const RunOpts *o)
{
    TestShape shape = {c->B, c->Hq, c->Tq, c->Tk, c->d, c->dv};
    if (!c->d)
        head_dims(impl, &shape.d, &shape.dv);
    const TestFeatures f = {c->Hkv, c->causal};
    const TestSwa w = {c->window, c->sink_tokens, c->sinks};
    const Direction dir = impl->backward ? DIR_BWD : DIR_FWD;
    int failed = 0;
    for (int in = IN_NONE; in < IN_COUNT; in++) {
        if ((in == IN_DO && dir == DIR_FWD) || (in == IN_SINKS && !c->sinks))
            continue;
        for (int which = 0; which < (in == IN_NONE ? 1 : PLANTS); which++) {
            TestProblem x;
            if (test_problem_make_swa(&x, &shape, &f, &w, 2300u + (uint64_t)(c - attn_configs)) != 0 ||
                (dir == DIR_BWD && test_problem_add_backward(&x, 23u) != 0)) {
                fprintf(stderr, "out of memory\n");
                test_problem_free(&x);
                return failed + 1;
            }
            float *target[IN_COUNT] = {NULL, x.q, x.k, x.v, x.dout, x.sinks};
            size_t numel[IN_COUNT] = {0, (size_t)c->B * c->Hq * c->Tq * shape.d,
                                      (size_t)c->B * c->Hkv * c->Tk * shape.d,
                                      (size_t)c->B * c->Hkv * c->Tk * shape.dv,
                                      (size_t)c->B * c->Hq * c->Tq * shape.dv, (size_t)c->Hq};
            size_t at = 0;
            Group plant = NO_GROUP;
            if (in != IN_NONE) {
                at = plant_index(numel[in], which, (uint64_t)(in * 7 + (int)(c - attn_configs)));
                target[in][at] = NAN;
                plant = attention_group(&x.p, (Input)in, at);
            }
            char opts[48] = "", nan_at[48] = "no NaN";
            if (o->block || o->ranks)
                snprintf(opts, sizeof opts, "%s%.0d%s%.0d", o->block ? " tiles " : "", o->block,
                         o->ranks ? " ranks " : "", o->ranks);
            if (in != IN_NONE)
                snprintf(nan_at, sizeof nan_at, "NaN in %s[%zu]", input_names[in], at);
            snprintf(r->run, sizeof r->run, "%s %s%s %s", r->stage_label, c->name, opts, nan_at);
            AttnTensors t = test_problem_tensors(&x);
            FlError err = {{0}};
            int rc = FL_OK;
            const int wrong = check_attention_run(r, impl, dir, &x.p, &t, o, plant, &rc, &err);
            test_problem_free(&x);
            if (wrong < 0) {
                if (in == IN_NONE && o->block)
                    return -1; /* the stage does not take 4 x 4 tiles */
                fprintf(stderr, "  %s: the run failed: %s\n", r->run, err.msg);
                failed++, r->failed_runs++, r->runs++;
                continue;
            }
            r->runs++;
            r->failed_runs += wrong;
            failed += wrong;
        }
    }
    return failed;
}

/* ---- paged problems (stages 11 and 16) -------------------------------------------------------- */

/* Three sequences of ragged lengths in pages of 4: decode (Tq = 1), causal Tq = 3 with GQA, a
 * window with sink tokens and learned sinks. */
static const TestPagedShape paged_shapes[] = {
    {3, 4, 2, 1, 8, 6, 4, {9, 1, 14}, 1, 0, 0, 0},
    {2, 6, 2, 3, 8, 8, 4, {10, 5}, 1, 0, 0, 0},
    {2, 4, 1, 3, 8, 8, 4, {13, 6}, 1, 3, 1, 1},
};
enum { PAGED_SHAPES = sizeof paged_shapes / sizeof paged_shapes[0] };
typedef enum { PIN_NONE, PIN_Q, PIN_K, PIN_V, PIN_SINKS, PIN_COUNT } PagedInput;
static const char *const paged_input_names[PIN_COUNT] = {"none", "q", "k page", "v page", "sinks"};

static int paged_config(Report *r, const StageImpl *impl, int shape, const RunOpts *o)
{
    TestPagedShape dims = paged_shapes[shape]; /* at the head dims impl runs (stage 16: 64) */
    if (impl->head_dims[0] > 0)
        dims.d = dims.dv = impl->head_dims[0];
    const TestPagedShape *s = &dims;
    int failed = 0;
    for (int in = PIN_NONE; in < PIN_COUNT; in++) {
        if (in == PIN_SINKS && !s->sinks)
            continue;
        for (int which = 0; which < (in == PIN_NONE ? 1 : 3); which++) {
            TestPaged x;
            if (test_paged_make(&x, s, 1100u + (uint64_t)shape) != 0) {
                fprintf(stderr, "out of memory\n");
                test_paged_free(&x);
                return failed + 1;
            }
            const AttnProblem *p = &x.p;
            char where[64] = "";
            Group plant = NO_GROUP;
            if (in == PIN_Q || in == PIN_SINKS) {
                const size_t n = in == PIN_Q ? (size_t)p->B * p->Hq * p->Tq * p->d : (size_t)p->Hq;
                const size_t at = plant_index(n, which, (uint64_t)(in * 5 + shape));
                (in == PIN_Q ? x.q : x.sinks)[at] = NAN;
                plant = attention_group(p, in == PIN_Q ? IN_Q : IN_SINKS, at);
                snprintf(where, sizeof where, "[%zu]", at);
            } else if (in == PIN_K || in == PIN_V) { /* key j of sequence b, kv head h: a used slot */
                const int b = which % p->B, n = x.lens[b];
                const int j = which == 0 ? 0 : which == 1 ? n / 2 : n - 1, h = which % p->Hkv;
                const int width = in == PIN_K ? p->d : p->dv;
                ((float *)test_paged_row(p, in == PIN_K ? x.k : x.v, b, h, j, width))[which % width] = NAN;
                snprintf(where, sizeof where, " (sequence %d, key %d, kv head %d)", b, j, h);
                plant = (Group){b, h};
            }
            snprintf(r->run, sizeof r->run, "%s paged %d splits %d NaN in %s%s", r->stage_label, shape,
                     o->splits, paged_input_names[in], where);
            AttnTensors t = {x.o, x.lse, NULL, NULL, NULL, NULL};
            FlError err = {{0}};
            int rc = FL_OK;
            const int wrong = check_attention_run(r, impl, DIR_FWD, p, &t, o, plant, &rc, &err);
            test_paged_free(&x);
            r->runs++;
            if (wrong < 0)
                fprintf(stderr, "  %s: the run failed: %s\n", r->run, err.msg);
            failed += wrong != 0, r->failed_runs += wrong != 0;
        }
    }
    return failed;
}

/* ---- MLA problems (stage 09) -------------------------------------------------------------------- */

/* A decode step, a causal prefill chunk (Tq = 3, so the stacked rows of a block have different
 * positions), odd sizes without the mask. */
static const TestMlaShape mla_shapes[] = {
    {2, 1, 9, 16, 12, 4, 8, 20, 4, 8, 1},
    {1, 3, 11, 16, 12, 4, 8, 20, 4, 6, 1},
    {2, 3, 7, 13, 11, 3, 7, 9, 2, 5, 0},
};
enum { MLA_SHAPES = sizeof mla_shapes / sizeof mla_shapes[0] };

/* The group of element `at` of MLA input `in`: x, ckv and kpe belong to one sequence, a weight to
 * every sequence. */
static Group mla_group(const MlaProblem *p, MlaInput in, size_t at)
{
    if (in == MLA_X || in == MLA_CKV || in == MLA_KPE)
        return (Group){(int)(at / (mla_numel(p, in) / (size_t)p->B)), -1};
    return (Group){-1, -1};
}

static int mla_config(Report *r, const StageImpl *impl, int shape, const RunOpts *o)
{
    int failed = 0;
    for (int in = -1; in < MLA_INPUT_COUNT; in++) { /* -1: no NaN */
        for (int which = 0; which < (in < 0 ? 1 : PLANTS); which++) {
            TestMla x;
            if (test_mla_make(&x, &mla_shapes[shape], 900u + (uint64_t)shape) != 0) {
                fprintf(stderr, "out of memory\n");
                return failed + 1;
            }
            const MlaProblem *p = &x.p;
            size_t at = 0;
            Group plant = NO_GROUP;
            if (in >= 0) {
                at = plant_index(mla_numel(p, in), which, (uint64_t)(in * 3 + shape));
                x.in[in][at] = NAN;
                plant = mla_group(p, (MlaInput)in, at);
                snprintf(r->run, sizeof r->run, "%s mla %d NaN in %s[%zu]", r->stage_label, shape,
                         mla_file_name(in), at);
            } else {
                snprintf(r->run, sizeof r->run, "%s mla %d no NaN", r->stage_label, shape);
            }
            const size_t ny = mla_numel(p, MLA_INPUT_COUNT);
            float *y = malloc(ny * sizeof(float));
            double *want = malloc(ny * sizeof(double));
            for (size_t e = 0; y && e < ny; e++)
                y[e] = NAN;
            RunCtx ctx = run_ctx(o);
            RunStats stats;
            FlError err = {{0}};
            int wrong = 1;
            if (!y || !want || ref_mla(p, want) != 0)
                fprintf(stderr, "  %s: out of memory\n", r->run);
            else if (mla_run(impl, p, y, &ctx, &stats, &err) != FL_OK)
                fprintf(stderr, "  %s: the run failed: %s\n", r->run, err.msg);
            else {
                const int y_dims[4] = {1, p->B, p->Tq, p->D};
                const Axes y_axes = {1, -1, 1};
                const size_t n = compare(r, "y", y, want, ny, y_dims, y_axes, plant,
                                         check_tolerance(impl->precision, 0));
                if (n) {
                    fprintf(stderr, "  %s: %zu wrong element(s)\n", r->run, n);
                    r->shown_runs++;
                }
                wrong = n != 0;
            }
            free(y), free(want);
            test_mla_free(&x);
            r->runs++, r->failed_runs += wrong, failed += wrong;
        }
    }
    return failed;
}

/* ---- every implementation ------------------------------------------------------------------------ */

static int check_impl(const StageImpl *impl)
{
    char label[128];
    snprintf(label, sizeof label, "stage %s %s (%s%s%s)", impl->stage, impl->name,
             impl->variant[0] ? impl->variant : "default", ", ", device_name(impl->device));
    Report r;
    memset(&r, 0, sizeof r);
    r.stage_label = label;
    const int ring = strcmp(impl->stage, "13") == 0;
    RunOpts base = {0, ring ? 2 : 0, 0};
    int refused_tiles = 0;
    if (kind_of_stage(impl) == &kind_mla) {
        for (int s = 0; s < MLA_SHAPES; s++)
            mla_config(&r, impl, s, &base);
    } else {
        for (size_t c = 0; c < sizeof attn_configs / sizeof attn_configs[0]; c++) {
            const AttnConfig *cfg = &attn_configs[c];
            AttnProblem need;
            memset(&need, 0, sizeof need);
            need.Hq = cfg->Hq, need.Hkv = cfg->Hkv, need.causal = cfg->causal, need.window = cfg->window;
            need.sink_tokens = cfg->sink_tokens;
            need.sinks = cfg->sinks ? (const float *)&need : NULL; /* only its presence counts */
            if (runner_missing_features(impl, DIR_FWD, &need))
                continue;
            RunOpts o = base;
            if (ring && impl->device == DEVICE_CUDA) {
                /* two GPU ranks need two GPUs: one rank where there is one */
                FlError err = {{0}};
                TestProblem x;
                const TestShape sh = {1, 1, 4, 4, 64, 64};
                if (test_problem_make(&x, &sh, 1) == 0) {
                    AttnTensors t = test_problem_tensors(&x);
                    RunCtx ctx = run_ctx(&o);
                    RunStats st;
                    if (runner_run(impl, DIR_FWD, &x.p, &t, &ctx, &st, &err) == FL_NO_DEVICE)
                        o.ranks = 1;
                }
                test_problem_free(&x);
            }
            attention_config(&r, impl, cfg, &o);
            if (impl->device == DEVICE_CPU) {
                o.block = 4;
                if (attention_config(&r, impl, cfg, &o) < 0)
                    refused_tiles = 1;
            }
        }
        if (impl->features & FEAT_PAGED) {
            static const int splits[] = {0, 1, 3};
            for (int s = 0; s < PAGED_SHAPES; s++)
                for (size_t k = 0; k < sizeof splits / sizeof splits[0]; k++) {
                    RunOpts o = base;
                    o.splits = splits[k];
                    paged_config(&r, impl, s, &o);
                }
        }
    }
    printf("%-40s %4d runs, %3d failed%s", label, r.runs, r.failed_runs,
           refused_tiles ? " (takes no 4x4 tiles: run with its own)" : "");
    if (r.spread_elements)
        printf(" (%zu elements NaN by spread inside the NaN's group)", r.spread_elements);
    printf("\n");
    if (r.runs == 0) {
        fprintf(stderr, "%s: nothing ran\n", label);
        return 1;
    }
    return r.failed_runs;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3 || (strcmp(argv[1], "cpu") && strcmp(argv[1], "cuda"))) {
        fprintf(stderr, "usage: test_nonfinite cpu|cuda [STAGE]\n");
        return 2;
    }
    const Device device = strcmp(argv[1], "cuda") ? DEVICE_CPU : DEVICE_CUDA;
    if (device == DEVICE_CUDA && !cuda_device_available()) {
        printf("test_nonfinite cuda: no CUDA device: skipped\n");
        return 77;
    }
    const char *only = argc == 3 ? argv[2] : NULL;
    verbose = only != NULL;
    int failed = 0, impls = 0;
    for (const StageImpl *const *it = stage_registry(); *it; it++) {
        if ((*it)->device != device || (only && strcmp((*it)->stage, only) != 0))
            continue;
        failed += check_impl(*it) != 0;
        impls++;
    }
    printf("%d of %d %s implementations failed\n", failed, impls, device_name(device));
    if (impls == 0) {
        fprintf(stderr, "no %s implementation in this build\n", device_name(device));
        return 1;
    }
    return failed ? 1 : 0;
}
