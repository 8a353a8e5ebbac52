/* runner.c — runs one stage implementation on one problem (CPU here; CUDA in cuda_runner.cu).
 *
 * The runner checks that the implementation supports what the problem asks for (features, head
 * dims), gives the stage its inputs in its precision (bf16 copies for a bf16 stage, float32 ones
 * widened from bf16 inputs for a float32 stage), allocates the stage's workspace,
 * points the HBM counter somewhere, and records what each pass counted. */
#include "runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "case.h"
#include "parallel.h"
#include "tensor.h"
#include "timer.h"

unsigned runner_missing_features(const StageImpl *impl, Direction dir, const AttnProblem *p)
{
    unsigned need = attn_required_features(p);
    if (dir == DIR_FWD)
        need &= ~(unsigned)FEAT_BACKWARD;
    return need & ~impl->features;
}

/* FL_OK, or FL_UNSUPPORTED with "stage 01 (naive) does not support causal; stage 07 adds it". */
static int check_features(const StageImpl *impl, Direction dir, const AttnProblem *p, FlError *err)
{
    unsigned missing = runner_missing_features(impl, dir, p);
    if (!missing)
        return FL_OK;
    char list[512] = "";
    size_t used = 0;
    for (unsigned bit = 0; bit < FEAT_COUNT; bit++) {
        unsigned f = 1u << bit;
        if (!(missing & f))
            continue;
        int n = snprintf(list + used, sizeof list - used, "%s%s; stage %s adds it",
                         used ? "; also " : "", attn_feature_name(f), attn_feature_added_by(f));
        if (n < 0 || (size_t)n >= sizeof list - used)
            break;
        used += (size_t)n;
    }
    return fl_fail(err, FL_UNSUPPORTED, "stage %s (%s%s%s, %s) does not support %s", impl->stage,
                   impl->name, impl->variant[0] ? " " : "", impl->variant, device_name(impl->device),
                   list);
}

int runner_head_dims_ok(const StageImpl *impl, const AttnProblem *p)
{
    if (impl->head_dims[0] <= 0 && impl->head_dims[1] <= 0)
        return 1;
    if (p->d != p->dv)
        return 0;
    return p->d == impl->head_dims[0] || p->d == impl->head_dims[1];
}

/* FL_OK, or FL_UNSUPPORTED with "stage 12 (tensor_cores, cpu) runs head dims d = dv in {64, 128};
 * this case has d = 24, dv = 40". */
static int check_head_dims(const StageImpl *impl, const AttnProblem *p, FlError *err)
{
    if (runner_head_dims_ok(impl, p))
        return FL_OK;
    char dims[48];
    stage_head_dims_text(impl, ", ", dims, sizeof dims);
    return fl_fail(err, FL_UNSUPPORTED, "stage %s (%s%s%s, %s) runs head dims d = dv in {%s}; this case has "
                   "d = %d, dv = %d", impl->stage, impl->name, impl->variant[0] ? " " : "", impl->variant,
                   device_name(impl->device), dims, p->d, p->dv);
}

/* ---- inputs in the stage's precision (bf16 for a PRECISION_BF16 stage, else float32) ---------- */

/* n bf16 patterns of x (round to nearest even, common/bf16.h); NULL when out of memory. */
static uint16_t *host_bf16(const float *x, size_t n)
{
    uint16_t *y = malloc((n ? n : 1) * sizeof *y);
    for (size_t i = 0; y && i < n; i++)
        y[i] = bf16_from_float(x[i]);
    return y;
}

/* n floats widened (exactly) from the bf16 patterns x; NULL when out of memory. */
static float *host_widened(const uint16_t *x, size_t n)
{
    float *y = malloc((n ? n : 1) * sizeof *y);
    for (size_t i = 0; y && i < n; i++)
        y[i] = bf16_to_float(x[i]);
    return y;
}

/* One input in the form the stage reads: a bf16 stage needs *h (made from *f when missing), a
 * float32 stage *f (made from *h when missing). 0 when out of memory. */
static int host_in_precision(int bf16_stage, const float **f, const uint16_t **h, size_t n)
{
    if (bf16_stage && !*h && *f)
        return (*h = host_bf16(*f, n)) != NULL;
    if (!bf16_stage && !*f && *h)
        return (*f = host_widened(*h, n)) != NULL;
    return 1;
}

static void free_if_made(const void *run, const void *given)
{
    if (run != given)
        free((void *)run);
}

/* Frees the copies stage_inputs made: the inputs of run that given did not hold. */
static void stage_inputs_free(const AttnProblem *given, AttnProblem *run)
{
    free_if_made(run->q, given->q), free_if_made(run->k, given->k);
    free_if_made(run->v, given->v), free_if_made(run->dout, given->dout);
    free_if_made(run->q_bf16, given->q_bf16), free_if_made(run->k_bf16, given->k_bf16);
    free_if_made(run->v_bf16, given->v_bf16), free_if_made(run->dout_bf16, given->dout_bf16);
    *run = *given;
}

/* *out = *p with q, k, v (and dout when with_dout) in the form impl reads (runner.h,
 * runner_run_arrays): the ones p gives, or host copies converted from the other form. Free with
 * stage_inputs_free(p, out). */
static int stage_inputs(const StageImpl *impl, const AttnProblem *p, int with_dout, AttnProblem *out,
                        FlError *err)
{
    *out = *p;
    const int bf16 = impl->precision == PRECISION_BF16;
    const size_t rows = (size_t)p->B * p->Hq * p->Tq;
    const int ok = host_in_precision(bf16, &out->q, &out->q_bf16, rows * p->d) &&
                   host_in_precision(bf16, &out->k, &out->k_bf16, attn_k_numel(p)) &&
                   host_in_precision(bf16, &out->v, &out->v_bf16, attn_v_numel(p)) &&
                   (!with_dout || host_in_precision(bf16, &out->dout, &out->dout_bf16, rows * p->dv));
    if (ok)
        return FL_OK;
    stage_inputs_free(p, out);
    return fl_fail(err, FL_BAD_INPUT, "stage %s (%s): out of memory for the %s copies of the inputs",
                   impl->stage, impl->name, bf16 ? "bf16" : "float32");
}

static size_t workspace_size(const StageImpl *impl, const AttnProblem *p, const RunCtx *ctx,
                             Direction dir)
{
    return impl->workspace_bytes ? impl->workspace_bytes(p, ctx, dir) : 0;
}

RunCtx runner_ctx_defaults(const RunCtx *opts)
{
    RunCtx ctx = {0};
    if (opts)
        ctx = *opts;
    if (ctx.sram_bytes == 0)
        ctx.sram_bytes = FLASHLAB_DEFAULT_SRAM_BYTES;
    if (ctx.threads < 1)
        ctx.threads = default_thread_count();
    return ctx;
}

/* The caller's settings with defaults; counters and workspace are the runner's to set. */
static RunCtx ctx_with_defaults(const RunCtx *opts)
{
    RunCtx ctx = runner_ctx_defaults(opts);
    ctx.hbm = NULL;
    ctx.hbm_dev = NULL;
    ctx.workspace = NULL;
    return ctx;
}

/* Host scratch of `bytes` (NULL for 0), 64-byte aligned. */
static int workspace_alloc(const StageImpl *impl, size_t bytes, void **ws, FlError *err)
{
    *ws = NULL;
    if (bytes == 0)
        return FL_OK;
    size_t rounded = (bytes + 63) / 64 * 64;
    *ws = aligned_alloc(64, rounded);
    if (!*ws)
        return fl_fail(err, FL_BAD_INPUT, "stage %s (%s): out of memory allocating %zu bytes of workspace",
                       impl->stage, impl->name, bytes);
    return FL_OK;
}

/* One pass (forward or backward) with its own workspace; counts into *counter when non-NULL. */
static int run_pass(const StageImpl *impl, Direction dir, const AttnProblem *p, AttnTensors *t,
                    RunCtx *ctx, HbmCounter *counter, size_t *extra_bytes, FlError *err)
{
    size_t bytes = workspace_size(impl, p, ctx, dir);
    if (extra_bytes)
        *extra_bytes = bytes;
    int rc = workspace_alloc(impl, bytes, &ctx->workspace, err);
    if (rc != FL_OK)
        return rc;
    ctx->hbm = counter;
    AttnFn fn = dir == DIR_FWD ? impl->forward : impl->backward;
    rc = fn(p, t, ctx, err);
    free(ctx->workspace);
    ctx->workspace = NULL;
    ctx->hbm = NULL;
    return rc;
}

/* Attention stages have a forward pass; a stage of another kind (kind.h) runs through runner_run_step. */
static int check_kind(const StageImpl *impl, FlError *err)
{
    if (impl->forward)
        return FL_OK;
    return fl_fail(err, FL_UNSUPPORTED, "stage %s (%s, %s) runs cases of another kind, not q/k/v attention cases",
                   impl->stage, impl->name, device_name(impl->device));
}

/* What runner_run and runner_time check before anything runs: the kind of problem, the features
 * and the head dims. */
int runner_check(const StageImpl *impl, Direction dir, const AttnProblem *p, FlError *err)
{
    int rc = check_kind(impl, err);
    if (rc == FL_OK)
        rc = check_features(impl, dir, p, err);
    if (rc == FL_OK)
        rc = check_head_dims(impl, p, err);
    return rc;
}

int runner_run(const StageImpl *impl, Direction dir, const AttnProblem *p, AttnTensors *t,
               const RunCtx *opts, RunStats *stats, FlError *err)
{
    return runner_run_arrays(impl, dir, p, t, NULL, opts, stats, err);
}

int runner_run_arrays(const StageImpl *impl, Direction dir, const AttnProblem *p, AttnTensors *t,
                      const RunnerArrays *arrays, const RunCtx *opts, RunStats *stats, FlError *err)
{
    static const RunnerArrays host_arrays = {0};
    RunStats local = {0};
    if (!arrays)
        arrays = &host_arrays;
    if (!stats)
        stats = &local;
    memset(stats, 0, sizeof *stats);
    if (impl->device == DEVICE_CPU && arrays->device_memory)
        return fl_fail(err, FL_BAD_INPUT, "stage %s (%s%s%s, cpu) reads host memory and was given CUDA device "
                       "pointers: run it on device \"cuda\", or pass host arrays", impl->stage, impl->name,
                       impl->variant[0] ? " " : "", impl->variant);
    const AttnProblem bounded = attn_problem_bounded(p);
    p = &bounded;
    int rc = runner_check(impl, dir, p, err);
    if (rc != FL_OK)
        return rc;
    if (impl->device == DEVICE_CUDA)
        return cuda_runner_run(impl, dir, p, t, arrays, opts, stats, err);

    RunCtx ctx = ctx_with_defaults(opts);
    const int backward = dir == DIR_BWD && attn_has_dout(p) && impl->backward;
    const int forward = !(backward && arrays->given_o_lse);
    AttnProblem run; /* p, with its inputs in the stage's precision */
    rc = stage_inputs(impl, p, backward, &run, err);
    if (rc != FL_OK)
        return rc;
    if (forward)
        rc = run_pass(impl, DIR_FWD, &run, t, &ctx, &stats->fwd, &stats->extra_bytes_fwd, err);
    if (rc == FL_OK && backward)
        rc = run_pass(impl, DIR_BWD, &run, t, &ctx, &stats->bwd, &stats->extra_bytes_bwd, err);
    stage_inputs_free(p, &run);
    return rc;
}

/* ---- timing --------------------------------------------------------------------------------- */

void runner_outputs_free(Tensor out[])
{
    for (int id = 0; id < OUT_COUNT; id++)
        tensor_free(&out[id]);
}

/* Allocates every output the problem produces and points t at them. */
int runner_outputs_alloc(const AttnProblem *p, Tensor out[], AttnTensors *t, FlError *err)
{
    float **slot[OUT_COUNT] = {&t->o, &t->lse, &t->dq, &t->dk, &t->dv, &t->dsinks};
    memset(t, 0, sizeof *t);
    memset(out, 0, OUT_COUNT * sizeof out[0]); /* all empty, so a failure part way frees only what was made */
    for (int id = 0; id < OUT_COUNT; id++) {
        if (!output_present(p, (OutputId)id))
            continue;
        int64_t shape[TENSOR_MAX_DIMS];
        int ndim = output_shape(p, (OutputId)id, shape);
        if (tensor_alloc_poisoned(&out[id], ndim, shape) != 0) {
            runner_outputs_free(out);
            return fl_fail(err, FL_BAD_INPUT, "out of memory allocating %s",
                           output_file_name((OutputId)id));
        }
        *slot[id] = out[id].data;
    }
    return FL_OK;
}

/* The workspace one timed run needs: the forward's, or for DIR_BWD the larger of both passes'. */
/* A small problem with p's head dims, head group, options and features: one sequence, one kv
 * head, at most 64 queries and keys, zero inputs. Paged problems are not shrunk (0 returned). */
enum { PREFLIGHT_T = 64 };
static int preflight_problem(const AttnProblem *p, Direction dir, Tensor in[4], AttnProblem *small)
{
    if (p->page_size > 0)
        return 0;
    *small = *p;
    small->B = 1, small->Hkv = 1, small->Hq = p->Hq / p->Hkv;
    small->Tq = p->Tq < PREFLIGHT_T ? p->Tq : PREFLIGHT_T;
    small->Tk = p->Tk < PREFLIGHT_T ? p->Tk : PREFLIGHT_T;
    const int64_t shapes[4][4] = {{1, small->Hq, small->Tq, p->d}, {1, 1, small->Tk, p->d},
                                  {1, 1, small->Tk, p->dv}, {1, small->Hq, small->Tq, p->dv}};
    const float **slot[4] = {&small->q, &small->k, &small->v, &small->dout};
    small->q_bf16 = small->k_bf16 = small->v_bf16 = small->dout_bf16 = NULL; /* made from the zeros */
    for (int i = 0; i < 4; i++) {
        if (i == 3 && !(dir == DIR_BWD && attn_has_dout(p))) {
            small->dout = NULL;
            continue;
        }
        if (tensor_alloc_poisoned(&in[i], 4, shapes[i]) != 0)
            return -1;
        memset(in[i].data, 0, tensor_bytes(&in[i]));
        *slot[i] = in[i].data;
    }
    return 1;
}

int runner_preflight(const StageImpl *impl, Direction dir, const AttnProblem *p, const RunCtx *opts,
                     FlError *err)
{
    Tensor in[4] = {{0}}, out[OUT_COUNT] = {{0}};
    AttnProblem small;
    AttnTensors t;
    int made = preflight_problem(p, dir, in, &small), rc = FL_OK;
    if (made < 0)
        rc = fl_fail(err, FL_BAD_INPUT, "out of memory for the preflight run");
    if (made > 0 && rc == FL_OK)
        rc = runner_outputs_alloc(&small, out, &t, err);
    if (made > 0 && rc == FL_OK)
        rc = runner_run(impl, dir, &small, &t, opts, NULL, err);
    runner_outputs_free(out);
    for (int i = 0; i < 4; i++)
        tensor_free(&in[i]);
    return rc;
}

static size_t timed_workspace_size(const StageImpl *impl, const AttnProblem *p, const RunCtx *ctx,
                                   Direction dir)
{
    size_t bytes = workspace_size(impl, p, ctx, DIR_FWD);
    if (dir == DIR_BWD && workspace_size(impl, p, ctx, DIR_BWD) > bytes)
        bytes = workspace_size(impl, p, ctx, DIR_BWD);
    return bytes;
}

/* One timed run: the forward pass, and for DIR_BWD the backward pass after it. */
static int timed_run(const StageImpl *impl, Direction dir, const AttnProblem *p, AttnTensors *t,
                     RunCtx *ctx, FlError *err)
{
    int rc = impl->forward(p, t, ctx, err);
    if (rc == FL_OK && dir == DIR_BWD)
        rc = impl->backward(p, t, ctx, err);
    return rc;
}

/* The timing asked for is one the runners can take: reps >= 1, warmup >= 0, and queued only for a
 * CUDA stage (a CPU run has no queue to wait in) that launches on the default stream. */
static int timing_valid(const StageImpl *impl, const Timing *tm, const char *who, FlError *err)
{
    if (tm->reps < 1 || tm->warmup < 0)
        return fl_fail(err, FL_BAD_INPUT, "%s: need reps >= 1 and warmup >= 0 (got %d, %d)", who, tm->reps,
                       tm->warmup);
    if (tm->queued && impl->device != DEVICE_CUDA)
        return fl_fail(err, FL_BAD_INPUT, "%s: stage %s (%s) runs on the CPU; only a CUDA run can be timed queued",
                       who, impl->stage, impl->name);
    if (tm->queued && impl->own_streams)
        return fl_fail(err, FL_UNSUPPORTED, "stage %s (%s) runs its kernels on streams of its own, which the hold "
                       "of --queued does not hold; time it without --queued", impl->stage, impl->name);
    return FL_OK;
}

/* Median of tm->reps timed calls of once(arg) after tm->warmup untimed ones (CPU clock). */
static int time_calls(int (*once)(void *arg, FlError *err), void *arg, const Timing *tm, double *median,
                      FlError *err)
{
    double *samples = malloc(sizeof(double) * (size_t)tm->reps);
    if (!samples)
        return fl_fail(err, FL_BAD_INPUT, "out of memory for %d timing samples", tm->reps);
    int rc = FL_OK;
    for (int i = 0; rc == FL_OK && i < tm->warmup + tm->reps; i++) {
        double start = timer_now_ms();
        rc = once(arg, err);
        if (i >= tm->warmup)
            samples[i - tm->warmup] = timer_now_ms() - start;
    }
    if (rc == FL_OK)
        *median = median_ms(samples, tm->reps);
    free(samples);
    return rc;
}

typedef struct {
    const StageImpl *impl;
    Direction dir;
    const AttnProblem *p;
    AttnTensors *t;
    RunCtx *ctx;
} AttnCall;

static int attn_call(void *arg, FlError *err)
{
    AttnCall *a = arg;
    return timed_run(a->impl, a->dir, a->p, a->t, a->ctx, err);
}

static int time_cpu(const StageImpl *impl, Direction dir, const AttnProblem *p, const RunCtx *opts,
                    const Timing *tm, double *median, FlError *err)
{
    Tensor out[OUT_COUNT];
    AttnTensors t;
    int rc = runner_outputs_alloc(p, out, &t, err);
    if (rc != FL_OK)
        return rc;
    RunCtx ctx = ctx_with_defaults(opts);
    ctx.rank_counters = NULL; /* counting off while timing */
    AttnProblem run; /* inputs in the stage's precision, made once, before the clock starts */
    rc = stage_inputs(impl, p, dir == DIR_BWD, &run, err);
    if (rc != FL_OK) {
        runner_outputs_free(out);
        return rc;
    }
    rc = workspace_alloc(impl, timed_workspace_size(impl, &run, &ctx, dir), &ctx.workspace, err);
    AttnCall call = {impl, dir, &run, &t, &ctx};
    if (rc == FL_OK)
        rc = time_calls(attn_call, &call, tm, median, err);
    free(ctx.workspace);
    stage_inputs_free(p, &run);
    runner_outputs_free(out);
    return rc;
}

int runner_time(const StageImpl *impl, Direction dir, const AttnProblem *p, const RunCtx *opts,
                const Timing *tm, double *median, FlError *err)
{
    int rc = timing_valid(impl, tm, "runner_time", err);
    if (rc != FL_OK)
        return rc;
    if (dir == DIR_BWD && (!attn_has_dout(p) || !impl->backward))
        return fl_fail(err, FL_BAD_INPUT, "stage %s (%s): timing the backward pass needs dO and a backward",
                       impl->stage, impl->name);
    const AttnProblem bounded = attn_problem_bounded(p);
    p = &bounded;
    rc = runner_check(impl, dir, p, err);
    if (rc != FL_OK)
        return rc;
    if (impl->device == DEVICE_CUDA)
        return cuda_runner_time(impl, dir, p, opts, tm, median, err);
    return time_cpu(impl, dir, p, opts, tm, median, err);
}

/* ---- a step of another kind ------------------------------------------------------------------ */

/* The host arrays as a CPU step receives them: float32 only (runner.h). */
static StepInputs host_step_inputs(const RunnerStep *s)
{
    StepInputs in;
    memset(&in, 0, sizeof in);
    for (int i = 0; i < s->n_in; i++)
        in.f32[i] = s->in[i];
    return in;
}

int runner_run_step(const StageImpl *impl, const RunnerStep *s, const RunCtx *opts, RunStats *stats,
                    FlError *err)
{
    RunStats local = {0};
    if (!stats)
        stats = &local;
    memset(stats, 0, sizeof *stats);
    if (impl->device == DEVICE_CUDA)
        return cuda_runner_run_step(impl, s, opts, stats, err);
    RunCtx ctx = ctx_with_defaults(opts);
    stats->extra_bytes_fwd = s->workspace_bytes;
    int rc = workspace_alloc(impl, s->workspace_bytes, &ctx.workspace, err);
    ctx.hbm = &stats->fwd;
    const StepInputs in = host_step_inputs(s);
    if (rc == FL_OK)
        rc = s->fn(&in, s->out, &ctx, s->arg, err);
    free(ctx.workspace);
    return rc;
}

typedef struct {
    const RunnerStep *s;
    StepInputs in;
    RunCtx *ctx;
} StepCall;

static int step_call(void *arg, FlError *err)
{
    StepCall *a = arg;
    return a->s->fn(&a->in, a->s->out, a->ctx, a->s->arg, err);
}

int runner_time_step(const StageImpl *impl, const RunnerStep *s, const RunCtx *opts, const Timing *tm,
                     double *median, FlError *err)
{
    int rc = timing_valid(impl, tm, "runner_time_step", err);
    if (rc != FL_OK)
        return rc;
    if (impl->device == DEVICE_CUDA)
        return cuda_runner_time_step(impl, s, opts, tm, median, err);
    RunCtx ctx = ctx_with_defaults(opts);
    rc = workspace_alloc(impl, s->workspace_bytes, &ctx.workspace, err);
    StepCall call = {s, host_step_inputs(s), &ctx};
    if (rc == FL_OK)
        rc = time_calls(step_call, &call, tm, median, err);
    free(ctx.workspace);
    return rc;
}
