/* kind_mla.c — the MLA kind (stages 09 and 17): one step of a DeepSeek-V2-style layer on a latent cache.
 *
 * A folder holding ckv.npy is an MLA case: x.npy, ckv.npy, kpe.npy and the six w_*.npy weights
 * (attn.h MlaProblem, docs/conventions.md "MLA cases"), y.npy expected, case.json with causal,
 * rope_theta and description. A run writes y (B, Tq, D). */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "kind_mla.h"
#include "random.h"

typedef struct {
    Tensor in[MLA_INPUT_COUNT]; /* indexed by MlaInput */
    Tensor y;                   /* expected (golden cases) */
    MlaProblem p;               /* sizes, options and pointers into in */
} MlaCase;

static MlaCase *mla_of(const Case *c) { return (MlaCase *)c->kind_data; }

/* ---- MLA inputs and output (kind_mla_stage.h) ---------------------------------------------------- */

const char *mla_file_name(int id)
{
    static const char *const names[MLA_INPUT_COUNT + 1] = {
        "x.npy", "ckv.npy", "kpe.npy", "w_dq.npy", "w_uq.npy", "w_qr.npy", "w_uk.npy", "w_uv.npy",
        "w_o.npy", "y.npy"};
    return id >= 0 && id <= MLA_INPUT_COUNT ? names[id] : "?";
}

static int shape_of(int64_t shape[4], int64_t a, int64_t b, int64_t c)
{
    shape[0] = a, shape[1] = b, shape[2] = c;
    return c > 0 ? 3 : 2;
}

int mla_shape(const MlaProblem *p, int id, int64_t shape[4])
{
    switch (id) {
    case MLA_X: return shape_of(shape, p->B, p->Tq, p->D);
    case MLA_CKV: return shape_of(shape, p->B, p->Tk, p->m);
    case MLA_KPE: return shape_of(shape, p->B, p->Tk, p->p);
    case MLA_W_DQ: return shape_of(shape, p->D, p->mq, 0);
    case MLA_W_UQ: return shape_of(shape, p->mq, p->H, p->dh);
    case MLA_W_QR: return shape_of(shape, p->mq, p->H, p->p);
    case MLA_W_UK: return shape_of(shape, p->m, p->H, p->dh);
    case MLA_W_UV: return shape_of(shape, p->m, p->H, p->dv);
    case MLA_W_O: return shape_of(shape, p->H, p->dv, p->D);
    case MLA_INPUT_COUNT: return shape_of(shape, p->B, p->Tq, p->D); /* y */
    default: return 0;
    }
}

size_t mla_numel(const MlaProblem *p, int id)
{
    int64_t shape[4];
    int ndim = mla_shape(p, id, shape);
    size_t n = ndim > 0;
    for (int i = 0; i < ndim; i++)
        n *= (size_t)shape[i];
    return n;
}

/* ---- loading ---------------------------------------------------------------------------------- */

static int apply_option(Case *c, const char *path, const cJSON *item, FlError *err)
{
    const char *key = item->string;
    MlaProblem *p = &mla_of(c)->p;
    if (strcmp(key, "causal") == 0)
        return case_option_bool(path, item, &p->causal, err);
    if (strcmp(key, "rope_theta") == 0)
        return case_option_positive(path, item, &p->rope_theta, err);
    if (strcmp(key, "description") == 0)
        return case_option_description(c, path, item, err);
    return case_option_unknown(path, key, " for an MLA case", "causal, rope_theta, description", err);
}

/* Sizes from x, ckv, kpe, w_dq, w_uq and w_uv; then every file must have exactly its shape. */
static int validate(const Case *c, MlaCase *m, FlError *err)
{
    static const struct {
        int id, ndim;
        const char *names;
    } dims[] = {{MLA_X, 3, "(B, Tq, D)"},     {MLA_CKV, 3, "(B, Tk, m)"},   {MLA_KPE, 3, "(B, Tk, p)"},
                {MLA_W_DQ, 2, "(D, mq)"},     {MLA_W_UQ, 3, "(mq, H, dh)"}, {MLA_W_UV, 3, "(m, H, dv)"}};
    const Tensor *in = m->in;
    int rc = FL_OK;
    for (size_t i = 0; !rc && i < sizeof dims / sizeof dims[0]; i++)
        rc = case_check_ndim(c, mla_file_name(dims[i].id), &in[dims[i].id], dims[i].ndim, dims[i].names, err);
    if (rc)
        return rc;
    MlaProblem *p = &m->p;
    p->B = (int)in[MLA_X].shape[0], p->Tq = (int)in[MLA_X].shape[1], p->D = (int)in[MLA_X].shape[2];
    p->Tk = (int)in[MLA_CKV].shape[1], p->m = (int)in[MLA_CKV].shape[2];
    p->p = (int)in[MLA_KPE].shape[2];
    p->mq = (int)in[MLA_W_DQ].shape[1];
    p->H = (int)in[MLA_W_UQ].shape[1], p->dh = (int)in[MLA_W_UQ].shape[2];
    p->dv = (int)in[MLA_W_UV].shape[2];
    for (int id = 0; !rc && id < MLA_INPUT_COUNT; id++) {
        int64_t shape[4];
        int ndim = mla_shape(p, id, shape);
        rc = case_check_shape(c, mla_file_name(id), &in[id], shape, ndim, err);
    }
    if (rc)
        return rc;
    if (p->p % 2 != 0)
        return fl_fail(err, FL_BAD_INPUT, "%s/kpe.npy: the RoPE width p = %d must be even (rotated pairs)",
                       c->dir, p->p);
    if (p->Tq > p->Tk)
        return fl_fail(err, FL_BAD_INPUT,
                       "%s: x.npy has Tq = %d new tokens but ckv.npy only Tk = %d cache entries; the "
                       "cache holds the new tokens, so Tq <= Tk",
                       c->dir, p->Tq, p->Tk);
    p->scale = (float)(1.0 / sqrt((double)(p->dh + p->p)));
    for (int id = 0; id < MLA_INPUT_COUNT; id++)
        p->in[id] = in[id].data;
    return FL_OK;
}

/* The Frobenius norm of a whole tensor (float64); NaN elements are skipped (the non-finite rule
 * covers them), an infinity makes it infinite. */
static double frobenius(const Tensor *t)
{
    double sum = 0.0;
    for (size_t i = 0; i < tensor_numel(t); i++)
        if (!isnan(t->data[i]))
            sum += (double)t->data[i] * t->data[i];
    return sqrt(sum);
}

/* Magnitudes that keep every float32 sum and product of stage 09, naive and absorbed, finite
 * (docs/conventions.md, "Limits on what a case may ask for"). Each vector-matrix product is
 * bounded through Cauchy-Schwarz by a row norm times the matrix's Frobenius norm, which bounds
 * every partial sum of absolute terms as well:
 *   c_q = x W_dq                    |c_q| <= |x| |W_dq|
 *   q_nope, q_pe = c_q W_uq, c_q W_qr   |c_q| |W_uq|, |c_q| |W_qr| (RoPE keeps the norm)
 *   q_lat = q_nope W_uk^T (absorbed), k_nope = ckv W_uk (naive)   |q_nope| |W_uk|, |ckv| |W_uk|
 *   their dot products with ckv and q_nope    both below |q_nope| |W_uk| |ckv|
 *   the scores s = scale (that + q_pe . kpe)
 *   the forward's unnormalised sums over Tk keys of exp(s - m) ckv (absorbed, Tk |ckv|) or of
 *   v = ckv W_uv (naive, |ckv| |W_uv| each): Tk |ckv| max(|W_uv|, 1); y = o W_o: that times |W_o|. */
static int check_magnitudes(const Case *c, const MlaCase *m, FlError *err)
{
    const MlaProblem *p = &m->p;
    const Tensor *in = m->in;
    const double x = case_max_row_norm(&in[MLA_X], p->D), ckv = case_max_row_norm(&in[MLA_CKV], p->m);
    const double kpe = case_max_row_norm(&in[MLA_KPE], p->p);
    const double cq = x * frobenius(&in[MLA_W_DQ]);
    const double q_nope = cq * frobenius(&in[MLA_W_UQ]), q_pe = cq * frobenius(&in[MLA_W_QR]);
    const double w_uk = frobenius(&in[MLA_W_UK]), w_uv = frobenius(&in[MLA_W_UV]);
    const double lat = fmax(q_nope * w_uk, ckv * w_uk); /* q_lat, k_nope */
    const double nope = q_nope * w_uk * ckv, scores = p->scale * (nope + q_pe * kpe);
    const double sums = (double)p->Tk * ckv * fmax(w_uv, 1.0), y = sums * frobenius(&in[MLA_W_O]);
    static const char why[] = "a float32 sum or product of stage 09 would overflow";
    if (cq > MAX_FLOAT_SUM)
        return case_too_large(c, "x.npy and w_dq.npy", "|x| |w_dq|", cq, MAX_FLOAT_SUM, why, err);
    if (fmax(q_nope, q_pe) > MAX_FLOAT_SUM)
        return case_too_large(c, "w_uq.npy and w_qr.npy", "the query bound |c_q| max(|w_uq|, |w_qr|)",
                              fmax(q_nope, q_pe), MAX_FLOAT_SUM, why, err);
    const double score_bound = fmax(fmax(lat, nope), fmax(q_pe * kpe, scores));
    if (score_bound > MAX_FLOAT_SUM)
        return case_too_large(c, "w_uk.npy, ckv.npy and kpe.npy",
                              "the score bound (|q_nope| or |ckv| times |w_uk|, |q_nope| |w_uk| |ckv| + |q_pe| |kpe|)",
                              score_bound, MAX_FLOAT_SUM, why, err);
    if (sums > MAX_FLOAT_SUM || y > MAX_FLOAT_SUM)
        return case_too_large(c, "ckv.npy, w_uv.npy and w_o.npy", "the output bound Tk |ckv| max(|w_uv|, 1) |w_o|",
                              fmax(sums, y), MAX_FLOAT_SUM, why, err);
    return FL_OK;
}

/* Sequence lengths below MAX_POSITIONS; y small enough to index with an int. */
static int check_sizes_fit(const Case *c, const MlaProblem *p, FlError *err)
{
    if (p->Tk >= MAX_POSITIONS)
        return fl_fail(err, FL_BAD_INPUT, "%s: Tk = %d positions; flashlab runs sequences of fewer than %d", c->dir,
                       p->Tk, MAX_POSITIONS);
    const double y = (double)p->B * p->Tq * p->D;
    if (y > INT_MAX)
        return fl_fail(err, FL_BAD_INPUT, "%s: y.npy would hold %.0f elements, more than the %d a stage can index",
                       c->dir, y, INT_MAX);
    return FL_OK;
}

static int load_files(Case *c, MlaCase *m, int want_expected, FlError *err)
{
    int rc = case_read_options(c, apply_option, err);
    for (int id = 0; !rc && id < MLA_INPUT_COUNT; id++)
        rc = case_load_tensor(c, mla_file_name(id), 1, &m->in[id], err);
    if (!rc)
        rc = validate(c, m, err);
    if (!rc)
        rc = check_sizes_fit(c, &m->p, err);
    if (!rc)
        rc = check_magnitudes(c, m, err);
    if (rc || !want_expected)
        return rc;
    rc = case_load_tensor(c, "y.npy", 1, &m->y, err);
    if (!rc) {
        int64_t shape[4];
        int ndim = mla_shape(&m->p, MLA_INPUT_COUNT, shape);
        rc = case_check_shape(c, "y.npy", &m->y, shape, ndim, err);
    }
    return rc;
}

static void release(Case *c)
{
    MlaCase *m = mla_of(c);
    if (!m)
        return;
    for (int id = 0; id < MLA_INPUT_COUNT; id++)
        tensor_free(&m->in[id]);
    tensor_free(&m->y);
    free(m);
    c->kind_data = NULL;
}

static int warn_nonfinite_inputs(const Case *c)
{
    int files = 0;
    for (int id = 0; id < MLA_INPUT_COUNT; id++)
        files += case_warn_nonfinite(c, mla_file_name(id), &mla_of(c)->in[id]);
    return files;
}

static int load(Case *c, int want_expected, FlError *err)
{
    MlaCase *m = calloc(1, sizeof *m);
    if (!m)
        return fl_fail(err, FL_BAD_INPUT, "%s: out of memory", c->dir);
    c->kind_data = m;
    m->p.rope_theta = 10000.0f;
    int rc = load_files(c, m, want_expected, err);
    if (rc == FL_OK)
        c->nonfinite_inputs = warn_nonfinite_inputs(c);
    return rc;
}

/* ---- running ---------------------------------------------------------------------------------- */

static const MlaEntry *entry_of(const StageImpl *impl) { return (const MlaEntry *)impl->kind_entry; }

static int takes(const StageImpl *impl)
{
    const KindEntry *e = (const KindEntry *)impl->kind_entry;
    return e && !strcmp(e->kind, kind_mla.name);
}

static Direction direction(const StageImpl *impl, const Case *c, int want)
{
    (void)impl, (void)c, (void)want;
    return DIR_FWD; /* an MLA step is forward only */
}

static int asks_backward(const Case *c)
{
    (void)c;
    return 0;
}

static int supports(const StageImpl *impl, Direction dir, const Case *c, char *short_why, size_t len,
                    FlError *why)
{
    (void)c;
    if (dir == DIR_FWD)
        return FL_OK;
    snprintf(short_why, len, "forward only");
    return fl_fail(why, FL_UNSUPPORTED, "stage %s (%s) computes an MLA step forward only: no backward pass",
                   impl->stage, impl->name);
}

/* The step the runner runs: the case's problem with its inputs where the runner put them. */
typedef struct {
    const StageImpl *impl;
    const MlaProblem *p;
} MlaStep;

static int mla_step(const StepInputs *in, float *out, RunCtx *ctx, const void *arg, FlError *err)
{
    const MlaStep *step = arg;
    MlaProblem p = *step->p;
    for (int id = 0; id < MLA_INPUT_COUNT; id++)
        p.in[id] = in->f32[id], p.in_bf16[id] = in->bf16[id];
    return entry_of(step->impl)->forward(&p, out, ctx, err);
}

static RunnerStep runner_step(const MlaStep *m, float *y, const RunCtx *ctx)
{
    RunnerStep s;
    memset(&s, 0, sizeof s);
    s.n_in = MLA_INPUT_COUNT;
    for (int id = 0; id < MLA_INPUT_COUNT; id++) {
        s.in[id] = m->p->in[id];
        s.in_numel[id] = mla_numel(m->p, id);
        s.in_name[id] = mla_file_name(id);
    }
    s.out = y;
    s.out_numel = mla_numel(m->p, MLA_INPUT_COUNT);
    const RunCtx defaults = runner_ctx_defaults(ctx);
    const MlaEntry *e = entry_of(m->impl);
    s.workspace_bytes = e->workspace_bytes ? e->workspace_bytes(m->p, &defaults) : 0;
    s.fn = mla_step;
    s.arg = m;
    return s;
}

int mla_run(const StageImpl *impl, const MlaProblem *p, float *y, const RunCtx *ctx, RunStats *stats, FlError *err)
{
    const MlaStep m = {impl, p};
    const RunnerStep s = runner_step(&m, y, ctx);
    return runner_run_step(impl, &s, ctx, stats, err);
}

int mla_time(const StageImpl *impl, const MlaProblem *p, const RunCtx *ctx, const Timing *timing, double *ms,
             FlError *err)
{
    float *y = malloc(mla_numel(p, MLA_INPUT_COUNT) * sizeof(float));
    if (!y)
        return fl_fail(err, FL_BAD_INPUT, "out of memory allocating y for timing");
    const MlaStep m = {impl, p};
    const RunnerStep s = runner_step(&m, y, ctx);
    int rc = runner_time_step(impl, &s, ctx, timing, ms, err);
    free(y);
    return rc;
}

static int run(const StageImpl *impl, Direction dir, const Case *c, const RunCtx *ctx, KindRun *r,
               FlError *err)
{
    (void)dir;
    const MlaProblem *p = &mla_of(c)->p;
    int64_t shape[4];
    int ndim = mla_shape(p, MLA_INPUT_COUNT, shape);
    memset(r, 0, sizeof *r);
    r->count = 1;
    r->file[0] = mla_file_name(MLA_INPUT_COUNT);
    if (tensor_alloc_poisoned(&r->got[0], ndim, shape) != 0)
        return fl_fail(err, FL_BAD_INPUT, "out of memory allocating y (%zu floats)", mla_numel(p, MLA_INPUT_COUNT));
    return mla_run(impl, p, r->got[0].data, ctx, &r->stats, err);
}

static int time_runs(const StageImpl *impl, Direction dir, const Case *c, const RunCtx *ctx, const Timing *timing,
                     double *ms, FlError *err)
{
    (void)dir;
    return mla_time(impl, &mla_of(c)->p, ctx, timing, ms, err);
}

static const Tensor *expected(const Case *c, const char *file)
{
    const Tensor *y = &mla_of(c)->y;
    return strcmp(file, mla_file_name(MLA_INPUT_COUNT)) == 0 && y->data ? y : NULL;
}

/* FLOPs of one MLA step, counted the absorbed way for both variants (the work the problem needs;
 * the naive variant does more): the query projections and the W_uk fold, the attention over the
 * latent cache (2·(m + p) per query-key pair for scores, 2·m for P·ckv, per head), the W_uv fold and
 * the output projection. */
static double flops(const Case *c, Direction dir)
{
    (void)dir;
    const MlaProblem *p = &mla_of(c)->p;
    const double tokens = (double)p->B * p->Tq;
    double pairs = (double)p->B * p->Tq * p->Tk;
    if (p->causal) /* row i (position Tk - Tq + i) sees Tk - Tq + i + 1 keys */
        pairs = (double)p->B * ((double)p->Tq * (p->Tk - p->Tq) + (double)p->Tq * (p->Tq + 1) / 2.0);
    const double project = (double)p->D * p->mq + (double)p->mq * p->H * (p->dh + p->p) +
                           (double)p->H * p->dh * p->m + (double)p->H * p->m * p->dv + (double)p->H * p->dv * p->D;
    return 2.0 * tokens * project + 2.0 * pairs * p->H * (2.0 * p->m + p->p);
}

static const char *label(Direction dir)
{
    (void)dir;
    return "mla";
}

static void columns(const Case *c, char *buf, size_t len)
{
    const MlaProblem *p = &mla_of(c)->p;
    snprintf(buf, len, "%3d  %3d  %3s  %6d  %6d  %4d", p->B, p->H, "-", p->Tq, p->Tk, p->dh);
}

static void describe(const Case *c, char *buf, size_t len)
{
    const MlaProblem *p = &mla_of(c)->p;
    snprintf(buf, len, "B=%d Tq=%d Tk=%d D=%d mq=%d H=%d dh=%d m=%d p=%d dv=%d%s", p->B, p->Tq, p->Tk, p->D,
             p->mq, p->H, p->dh, p->m, p->p, p->dv, p->causal ? " causal" : "");
}

static void describe_json(const Case *c, FILE *f)
{
    const MlaProblem *p = &mla_of(c)->p;
    fprintf(f, "\"B\": %d, \"Hq\": %d, \"Hkv\": 1, \"Tq\": %d, \"Tk\": %d, \"d\": %d, \"dv\": %d, \"causal\": %s, "
               "\"mla\": {\"D\": %d, \"mq\": %d, \"m\": %d, \"p\": %d}, ",
            p->B, p->H, p->Tq, p->Tk, p->dh, p->dv, p->causal ? "true" : "false", p->D, p->mq, p->m, p->p);
}

/* Seeded inputs: x, ckv, kpe ~ N(0, 1), each weight ~ N(0, 1/fan-in), with B, H, Tq (default T:
 * prefill), Tk = T, dh = dv = d and m, p, D, mq from the shape (default DeepSeek-V2's 512, 64, 5120,
 * 1536). */
static int bench_case(const BenchShape *s, const StageImpl *impl, int T, int d, Direction dir, Case *c,
                      FlError *err)
{
    (void)impl, (void)dir;
    memset(c, 0, sizeof *c);
    c->kind = &kind_mla;
    MlaCase *m = calloc(1, sizeof *m);
    if (!m)
        return fl_fail(err, FL_BAD_INPUT, "out of memory for MLA inputs of T=%d d=%d", T, d);
    c->kind_data = m;
    MlaProblem *p = &m->p;
    p->B = s->B, p->H = s->H, p->Tq = s->Tq > 0 ? s->Tq : T, p->Tk = T, p->dh = p->dv = d;
    p->m = bench_size(s, "--latent", 512), p->p = bench_size(s, "--rope-dim", 64);
    p->D = bench_size(s, "--model-dim", 5120), p->mq = bench_size(s, "--q-rank", 1536);
    p->causal = s->causal, p->rope_theta = 10000.0f;
    p->scale = 1.0f / sqrtf((float)(p->dh + p->p));
    if (p->Tq > p->Tk)
        return fl_fail(err, FL_BAD_INPUT, "--Tq %d > --T %d: the cache holds the new tokens", p->Tq, p->Tk);
    const int fan_in[MLA_INPUT_COUNT] = {1, 1, 1, p->D, p->mq, p->mq, p->m, p->m, p->H * p->dv};
    Rng rng;
    rng_seed(&rng, bench_seed(T, d));
    for (int id = 0; id < MLA_INPUT_COUNT; id++) {
        int64_t shape[4];
        int ndim = mla_shape(p, id, shape);
        if (tensor_alloc_poisoned(&m->in[id], ndim, shape) != 0)
            return fl_fail(err, FL_BAD_INPUT, "out of memory for MLA inputs of T=%d d=%d", T, d);
        rng_fill_normal(&rng, m->in[id].data, tensor_numel(&m->in[id]), 1.0f / sqrtf((float)fan_in[id]));
        p->in[id] = m->in[id].data;
    }
    return FL_OK;
}

/* bench's options for the sizes of an MLA step: m, p, D, mq. */
static const KindOption bench_options[] = {
    {"--latent", "M", 1, 1 << 16, NULL},
    {"--rope-dim", "P", 2, 1 << 16, "rotated pairs"},
    {"--model-dim", "D", 1, 1 << 20, NULL},
    {"--q-rank", "MQ", 1, 1 << 20, NULL},
    {NULL, NULL, 0, 0, NULL},
};

static const KindHelp help[] = {
    {"check", "Stages 09 and 17 (MLA, MLA in bf16) run the MLA cases instead (folders with ckv.npy,\n"
              "docs/conventions.md) and compare y.npy with their precision's forward tolerance; the other\n"
              "stages skip MLA cases.\n"},
    {"run", "An MLA case (x.npy, ckv.npy, kpe.npy and the w_*.npy weights; stages 09 and 17 only) writes y.npy.\n"},
    {"tour", "MLA rows (stages 09 and 17) run the golden MLA case mla_prefill_t24 instead ('mla' in the\n"
             "checked column; GFLOP/s from the MLA step's FLOPs, see bench --help).\n"},
    {"bench",
     "MLA rows (stages 09 and 17) time one MLA step on seeded inputs: x (B, Tq, D), the latent cache\n"
     "ckv (B, T, m) and kpe (B, T, p), the weights (each N(0, 1/fan-in)); H heads, dh = dv = d, Tq = T\n"
     "unless --Tq; m, p, D, mq from --latent, --rope-dim (even), --model-dim, --q-rank, default\n"
     "DeepSeek-V2's 512, 64, 5120, 1536. Their FLOPs are the absorbed form's, for every variant: 2 per\n"
     "multiply-add of the query and output projections and the W_uk / W_uv folds, plus 2 H (2m + p)\n"
     "per query-key pair.\n"
     "Stages 09 and 17 run only when --stages names them: their problem is not an attention one.\n"},
    {NULL, NULL},
};

static const char *const input_files[] = {"case.json", "x.npy",    "ckv.npy",  "kpe.npy",  "w_dq.npy",
                                          "w_uq.npy",  "w_qr.npy", "w_uk.npy", "w_uv.npy", "w_o.npy", NULL};

const CaseKind kind_mla = {
    .name = "mla",
    .marker = "ckv.npy",
    .tour_case = "mla_prefill_t24",
    .input_files = input_files,
    .load = load,
    .release = release,
    .takes = takes,
    .direction = direction,
    .asks_backward = asks_backward,
    .supports = supports,
    .run = run,
    .time = time_runs,
    .expected = expected,
    .label = label,
    .flops = flops,
    .describe = describe,
    .describe_json = describe_json,
    .columns = columns,
    .bench_case = bench_case,
    .bench_options = bench_options,
    .help = help,
};

const MlaProblem *mla_case_problem(const Case *c)
{
    return c->kind == &kind_mla && c->kind_data ? &mla_of(c)->p : NULL;
}

const Tensor *mla_case_input(const Case *c, int id)
{
    return c->kind == &kind_mla && c->kind_data && id >= 0 && id < MLA_INPUT_COUNT ? &mla_of(c)->in[id] : NULL;
}
