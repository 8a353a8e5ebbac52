/* api.c — libflashlab's public interface (include/flashlab.h) on top of the runner: the same path
 * into a stage that `flashlab run` takes (stage_find, runner_run_arrays), with the caller's arrays
 * as the problem. Host outputs go to buffers of the runner's (NaN-poisoned) and are copied to the
 * caller's only when the run succeeds, so a failed call writes nothing; device outputs are written
 * in place, after every argument has been checked. */
#include "flashlab.h"

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "attn.h"
#include "case.h"
#include "kind.h"
#include "runner.h"

static _Thread_local char last_error[sizeof(((FlError *)0)->msg)];

static int fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return code;
}

/* The status of a call that went through the harness, and its message. */
static int finish(int rc, const FlError *err)
{
    if (rc == FL_OK)
        last_error[0] = '\0';
    else
        snprintf(last_error, sizeof last_error, "%s", err->msg);
    return rc;
}

int flashlab_api_version(void) { return FLASHLAB_API_VERSION; }

const char *flashlab_last_error(void) { return last_error; }

/* The implementation the caller names, or why not. */
static int find_stage(const char *stage, const char *variant, const char *device, const StageImpl **impl)
{
    Device dev;
    if (device && strcmp(device, "cuda") == 0)
        dev = DEVICE_CUDA;
    else if (!device || strcmp(device, "cpu") == 0)
        dev = DEVICE_CPU;
    else
        return fail(FLASHLAB_BAD_INPUT, "device '%s': expected \"cpu\" or \"cuda\"", device);
    if (dev == DEVICE_CUDA && !cuda_device_available())
        return fail(FLASHLAB_NO_DEVICE, "device \"cuda\": no usable CUDA device (%s)", cuda_device_description());
    *impl = stage_find(stage, dev, variant);
    if (!*impl)
        return fail(FLASHLAB_BAD_INPUT, "no stage '%s'%s%s%s on %s in this build (flashlab_list names them)",
                    stage ? stage : "(null)", variant && *variant ? " variant '" : "", variant && *variant ? variant : "",
                    variant && *variant ? "'" : "", device_name(dev));
    if (kind_of_stage(*impl) != &kind_attention)
        return fail(FLASHLAB_UNSUPPORTED, "stage %s (%s) runs %s cases, not q, k, v attention", (*impl)->stage,
                    (*impl)->name, kind_of_stage(*impl)->name);
    return FLASHLAB_OK;
}

static int positive(const char *name, int x)
{
    return x > 0 ? FLASHLAB_OK : fail(FLASHLAB_BAD_INPUT, "%s = %d: it must be positive", name, x);
}

/* The caller's struct with the fields its struct_size does not reach (a caller built against
 * version 1: memory, dtype, stream) read as zero: host memory, float32, no stream. */
static int read_problem(const flashlab_problem *in, flashlab_problem *out)
{
    const size_t v1_size = offsetof(flashlab_problem, memory);
    if (!in || in->struct_size < v1_size)
        return fail(FLASHLAB_BAD_INPUT, "flashlab_problem: NULL, or struct_size %zu smaller than the %zu of "
                    "version 1 (set struct_size = sizeof(flashlab_problem))", in ? in->struct_size : 0, v1_size);
    memset(out, 0, sizeof *out);
    memcpy(out, in, in->struct_size < sizeof *out ? in->struct_size : sizeof *out);
    return FLASHLAB_OK;
}

/* Where the arrays live and what q, k, v and dout hold, checked. */
static int check_memory_and_dtype(const flashlab_problem *in)
{
    if (in->memory != FLASHLAB_MEMORY_HOST && in->memory != FLASHLAB_MEMORY_CUDA)
        return fail(FLASHLAB_BAD_INPUT, "memory = %d: expected FLASHLAB_MEMORY_HOST (%d) or FLASHLAB_MEMORY_CUDA (%d)",
                    in->memory, FLASHLAB_MEMORY_HOST, FLASHLAB_MEMORY_CUDA);
    if (in->dtype != FLASHLAB_FLOAT32 && in->dtype != FLASHLAB_BF16)
        return fail(FLASHLAB_BAD_INPUT, "dtype = %d: expected FLASHLAB_FLOAT32 (%d) or FLASHLAB_BF16 (%d)", in->dtype,
                    FLASHLAB_FLOAT32, FLASHLAB_BF16);
    return FLASHLAB_OK;
}

/* The caller's problem as the harness's (q, k, v and dout as float32 or as bf16, by dtype) and
 * where its arrays live, checked the way the case loader checks a folder's sizes. */
static int to_problem(const flashlab_problem *given, const void *dout, AttnProblem *p, RunnerArrays *arrays)
{
    flashlab_problem in;
    if (read_problem(given, &in) != FLASHLAB_OK || check_memory_and_dtype(&in) != FLASHLAB_OK)
        return FLASHLAB_BAD_INPUT;
    const char *names[] = {"B", "Hq", "Hkv", "Tq", "Tk", "d", "dv"};
    const int dims[] = {in.B, in.Hq, in.Hkv, in.Tq, in.Tk, in.d, in.dv};
    for (int i = 0; i < 7; i++)
        if (positive(names[i], dims[i]) != FLASHLAB_OK)
            return FLASHLAB_BAD_INPUT;
    if (in.Hq % in.Hkv != 0)
        return fail(FLASHLAB_BAD_INPUT, "Hq = %d is not a multiple of Hkv = %d", in.Hq, in.Hkv);
    if (in.Tq >= MAX_POSITIONS || in.Tk >= MAX_POSITIONS)
        return fail(FLASHLAB_BAD_INPUT, "Tq = %d, Tk = %d: flashlab runs sequences of fewer than %d positions", in.Tq,
                    in.Tk, MAX_POSITIONS);
    if (in.window < 0 || in.sink_tokens < 0)
        return fail(FLASHLAB_BAD_INPUT, "window = %d, sink_tokens = %d: neither may be negative", in.window,
                    in.sink_tokens);
    if (!(in.scale >= 0.0f) || !isfinite(in.scale) || in.scale > MAX_FLOAT_SUM)
        return fail(FLASHLAB_BAD_INPUT, "scale = %g: it must be finite and >= 0 (0 = 1 / sqrt(d))", (double)in.scale);
    if (!in.q || !in.k || !in.v)
        return fail(FLASHLAB_BAD_INPUT, "q, k and v must all be given");
    memset(p, 0, sizeof *p);
    p->B = in.B, p->Hq = in.Hq, p->Hkv = in.Hkv, p->Tq = in.Tq, p->Tk = in.Tk, p->d = in.d, p->dv = in.dv;
    p->scale = in.scale > 0.0f ? in.scale : 1.0f / sqrtf((float)in.d);
    p->causal = in.causal != 0 || in.window > 0;
    p->window = in.window, p->sink_tokens = in.sink_tokens;
    p->sinks = in.sinks;
    if (in.dtype == FLASHLAB_BF16)
        p->q_bf16 = in.q, p->k_bf16 = in.k, p->v_bf16 = in.v, p->dout_bf16 = dout;
    else
        p->q = in.q, p->k = in.k, p->v = in.v, p->dout = dout;
    for (int id = 0; id < OUT_COUNT; id++) { /* every output indexable with an int, as for a case */
        if (!output_present(p, (OutputId)id))
            continue;
        int64_t shape[TENSOR_MAX_DIMS];
        const int ndim = output_shape(p, (OutputId)id, shape);
        double numel = 1.0;
        for (int i = 0; i < ndim; i++)
            numel *= (double)shape[i];
        if (numel > INT_MAX)
            return fail(FLASHLAB_BAD_INPUT, "%s would hold %.0f elements, more than the %d a stage can index",
                        output_file_name((OutputId)id), numel, INT_MAX);
    }
    memset(arrays, 0, sizeof *arrays);
    arrays->device_memory = in.memory == FLASHLAB_MEMORY_CUDA;
    arrays->stream = in.stream;
    return FLASHLAB_OK;
}

static void fill_counters(const RunStats *s, flashlab_counters *c)
{
    if (!c)
        return;
    const size_t size = c->struct_size;
    memset(c, 0, sizeof *c);
    c->struct_size = size;
    c->fwd_read = s->fwd.bytes_read, c->fwd_written = s->fwd.bytes_written, c->fwd_extra = s->extra_bytes_fwd;
    c->bwd_read = s->bwd.bytes_read, c->bwd_written = s->bwd.bytes_written, c->bwd_extra = s->extra_bytes_bwd;
}

/* Runs impl on the caller's device arrays in place: the outputs are dst, the given o and lse
 * (a backward pass alone) are read there. */
static int run_in_place(const StageImpl *impl, Direction dir, const AttnProblem *p, const RunnerArrays *arrays,
                        float *const dst[OUT_COUNT], RunStats *stats, FlError *err)
{
    AttnTensors t = {dst[OUT_O], dst[OUT_LSE], dst[OUT_DQ], dst[OUT_DK], dst[OUT_DV], dst[OUT_DSINKS]};
    return runner_run_arrays(impl, dir, p, &t, arrays, NULL, stats, err);
}

/* Runs impl on host arrays: the outputs go to the runner's (NaN-poisoned) buffers, given o and lse
 * are copied into them first, and each output the caller gave a buffer for is copied out only when
 * the run succeeds. */
static int run_on_host(const StageImpl *impl, Direction dir, const AttnProblem *p, const RunnerArrays *arrays,
                       float *const dst[OUT_COUNT], RunStats *stats, FlError *err)
{
    Tensor out[OUT_COUNT];
    AttnTensors t;
    int rc = runner_outputs_alloc(p, out, &t, err);
    if (rc == FL_OK && arrays->given_o_lse)
        for (int id = OUT_O; id <= OUT_LSE; id++)
            memcpy(out[id].data, dst[id], tensor_numel(&out[id]) * sizeof(float));
    if (rc == FL_OK)
        rc = runner_run_arrays(impl, dir, p, &t, arrays, NULL, stats, err);
    for (int id = 0; rc == FL_OK && id < OUT_COUNT; id++)
        if (dst[id] && out[id].data && !(arrays->given_o_lse && id <= OUT_LSE))
            memcpy(dst[id], out[id].data, tensor_numel(&out[id]) * sizeof(float));
    runner_outputs_free(out);
    return rc;
}

/* Runs impl on p in dir with the caller's arrays: dst holds the outputs (and, with
 * arrays->given_o_lse, the given o and lse as dst[OUT_O] and dst[OUT_LSE], read only). */
static int run(const StageImpl *impl, Direction dir, const AttnProblem *p, const RunnerArrays *arrays,
               float *const dst[OUT_COUNT], flashlab_counters *counters)
{
    FlError err = {{0}};
    RunStats stats;
    memset(&stats, 0, sizeof stats);
    int rc = arrays->device_memory ? run_in_place(impl, dir, p, arrays, dst, &stats, &err)
                                   : run_on_host(impl, dir, p, arrays, dst, &stats, &err);
    if (rc == FL_OK)
        fill_counters(&stats, counters);
    return finish(rc, &err);
}

int flashlab_forward(const char *stage, const char *variant, const char *device, const flashlab_problem *p,
                     float *o, float *lse, flashlab_counters *counters)
{
    const StageImpl *impl = NULL;
    AttnProblem prob;
    RunnerArrays arrays;
    int rc = find_stage(stage, variant, device, &impl);
    if (rc == FLASHLAB_OK)
        rc = to_problem(p, NULL, &prob, &arrays);
    if (rc == FLASHLAB_OK && (!o || !lse))
        rc = fail(FLASHLAB_BAD_INPUT, "o and lse must both be given");
    if (rc != FLASHLAB_OK)
        return rc;
    float *const dst[OUT_COUNT] = {o, lse, NULL, NULL, NULL, NULL};
    return run(impl, DIR_FWD, &prob, &arrays, dst, counters);
}

/* The backward's arguments: the problem, dout, and the gradients' buffers. */
static int backward_problem(const char *stage, const char *variant, const char *device, const flashlab_problem *p,
                            const void *dout, float *const grads[4], const StageImpl **impl, AttnProblem *prob,
                            RunnerArrays *arrays)
{
    int rc = find_stage(stage, variant, device, impl);
    if (rc == FLASHLAB_OK)
        rc = to_problem(p, dout, prob, arrays);
    if (rc == FLASHLAB_OK && (!dout || !grads[0] || !grads[1] || !grads[2] || (prob->sinks && !grads[3])))
        rc = fail(FLASHLAB_BAD_INPUT, "dout, dq, dk and dv must all be given (and dsinks with sinks)");
    return rc;
}

/* What both backward entries do: given_o_lse = 1 reads o and lse (a forward's outputs, never
 * written: RunnerArrays.given_o_lse), 0 lets the forward pass write them first. */
static int backward_entry(const char *stage, const char *variant, const char *device, const flashlab_problem *p,
                          const void *dout, float *o, float *lse, float *const grads[4], int given_o_lse,
                          flashlab_counters *counters)
{
    const StageImpl *impl = NULL;
    AttnProblem prob;
    RunnerArrays arrays;
    int rc = backward_problem(stage, variant, device, p, dout, grads, &impl, &prob, &arrays);
    if (rc == FLASHLAB_OK && (!o || !lse))
        rc = fail(FLASHLAB_BAD_INPUT, "o and lse must both be given (%s)",
                  given_o_lse ? "the forward's outputs, read here" : "the forward pass writes them");
    if (rc != FLASHLAB_OK)
        return rc;
    arrays.given_o_lse = given_o_lse;
    float *const dst[OUT_COUNT] = {o, lse, grads[0], grads[1], grads[2], prob.sinks ? grads[3] : NULL};
    return run(impl, DIR_BWD, &prob, &arrays, dst, counters);
}

int flashlab_backward(const char *stage, const char *variant, const char *device, const flashlab_problem *p,
                      const void *dout, float *o, float *lse, float *dq, float *dk, float *dv, float *dsinks,
                      flashlab_counters *counters)
{
    float *const grads[4] = {dq, dk, dv, dsinks};
    return backward_entry(stage, variant, device, p, dout, o, lse, grads, 0, counters);
}

int flashlab_backward_from(const char *stage, const char *variant, const char *device, const flashlab_problem *p,
                           const void *dout, const float *o, const float *lse, float *dq, float *dk, float *dv,
                           float *dsinks, flashlab_counters *counters)
{
    float *const grads[4] = {dq, dk, dv, dsinks};
    return backward_entry(stage, variant, device, p, dout, (float *)o, (float *)lse, grads, 1, counters);
}

size_t flashlab_list(char *buf, size_t len)
{
    size_t used = 0;
    for (const StageImpl *const *it = stage_registry(); *it; it++) {
        const StageImpl *impl = *it;
        char line[256];
        int n = snprintf(line, sizeof line, "%s %s %s %s %s", impl->stage, impl->name, device_name(impl->device),
                         impl->variant[0] ? impl->variant : "-", impl->precision == PRECISION_BF16 ? "bf16" : "float32");
        for (unsigned bit = 0; bit < FEAT_COUNT && n < (int)sizeof line; bit++)
            if (impl->features & (1u << bit))
                n += snprintf(line + n, sizeof line - (size_t)n, " %s", attn_feature_name(1u << bit));
        const CaseKind *kind = kind_of_stage(impl);
        if (kind->marker && n < (int)sizeof line) /* a stage of another kind: its name, as `flashlab list` */
            n += snprintf(line + n, sizeof line - (size_t)n, " %s", kind->name);
        if (buf && used + (size_t)n + 1 < len) {
            memcpy(buf + used, line, (size_t)n);
            buf[used + (size_t)n] = '\n';
            buf[used + (size_t)n + 1] = '\0';
        }
        used += (size_t)n + 1;
    }
    return used + 1;
}
