/* api.c — libflashlab's public interface (include/flashlab.h) on top of the runner: the same path
 * into a stage that `flashlab run` takes (stage_find, runner_run), with the caller's arrays as the
 * problem. Outputs go to buffers of the runner's (NaN-poisoned) and are copied to the caller's only
 * when the run succeeds, so a failed call writes nothing. */
#include "flashlab.h"

#include <limits.h>
#include <math.h>
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

/* The caller's problem as the harness's, checked the way the case loader checks a folder's sizes. */
static int to_problem(const flashlab_problem *in, const float *dout, AttnProblem *p)
{
    if (!in || in->struct_size < sizeof *in)
        return fail(FLASHLAB_BAD_INPUT, "flashlab_problem: NULL, or struct_size %zu smaller than this library's %zu "
                    "(a caller built for an older interface)", in ? in->struct_size : 0, sizeof *in);
    const char *names[] = {"B", "Hq", "Hkv", "Tq", "Tk", "d", "dv"};
    const int dims[] = {in->B, in->Hq, in->Hkv, in->Tq, in->Tk, in->d, in->dv};
    for (int i = 0; i < 7; i++)
        if (positive(names[i], dims[i]) != FLASHLAB_OK)
            return FLASHLAB_BAD_INPUT;
    if (in->Hq % in->Hkv != 0)
        return fail(FLASHLAB_BAD_INPUT, "Hq = %d is not a multiple of Hkv = %d", in->Hq, in->Hkv);
    if (in->Tq >= MAX_POSITIONS || in->Tk >= MAX_POSITIONS)
        return fail(FLASHLAB_BAD_INPUT, "Tq = %d, Tk = %d: flashlab runs sequences of fewer than %d positions", in->Tq,
                    in->Tk, MAX_POSITIONS);
    if (in->window < 0 || in->sink_tokens < 0)
        return fail(FLASHLAB_BAD_INPUT, "window = %d, sink_tokens = %d: neither may be negative", in->window,
                    in->sink_tokens);
    if (!(in->scale >= 0.0f) || !isfinite(in->scale) || in->scale > MAX_FLOAT_SUM)
        return fail(FLASHLAB_BAD_INPUT, "scale = %g: it must be finite and >= 0 (0 = 1 / sqrt(d))", (double)in->scale);
    if (!in->q || !in->k || !in->v)
        return fail(FLASHLAB_BAD_INPUT, "q, k and v must all be given");
    memset(p, 0, sizeof *p);
    p->B = in->B, p->Hq = in->Hq, p->Hkv = in->Hkv, p->Tq = in->Tq, p->Tk = in->Tk, p->d = in->d, p->dv = in->dv;
    p->scale = in->scale > 0.0f ? in->scale : 1.0f / sqrtf((float)in->d);
    p->causal = in->causal != 0 || in->window > 0;
    p->window = in->window, p->sink_tokens = in->sink_tokens;
    p->q = in->q, p->k = in->k, p->v = in->v, p->sinks = in->sinks, p->dout = dout;
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

/* Runs impl on p in dir and, on success, copies each output the caller gave a buffer for. */
static int run(const StageImpl *impl, Direction dir, const AttnProblem *p, float *const dst[OUT_COUNT],
               flashlab_counters *counters)
{
    FlError err = {{0}};
    Tensor out[OUT_COUNT];
    AttnTensors t;
    RunStats stats;
    memset(&stats, 0, sizeof stats);
    int rc = runner_outputs_alloc(p, out, &t, &err);
    if (rc == FL_OK)
        rc = runner_run(impl, dir, p, &t, NULL, &stats, &err);
    if (rc == FL_OK) {
        for (int id = 0; id < OUT_COUNT; id++)
            if (dst[id] && out[id].data)
                memcpy(dst[id], out[id].data, tensor_numel(&out[id]) * sizeof(float));
        fill_counters(&stats, counters);
    }
    runner_outputs_free(out);
    return finish(rc, &err);
}

int flashlab_forward(const char *stage, const char *variant, const char *device, const flashlab_problem *p,
                     float *o, float *lse, flashlab_counters *counters)
{
    const StageImpl *impl = NULL;
    AttnProblem prob;
    int rc = find_stage(stage, variant, device, &impl);
    if (rc == FLASHLAB_OK)
        rc = to_problem(p, NULL, &prob);
    if (rc == FLASHLAB_OK && (!o || !lse))
        rc = fail(FLASHLAB_BAD_INPUT, "o and lse must both be given");
    if (rc != FLASHLAB_OK)
        return rc;
    float *const dst[OUT_COUNT] = {o, lse, NULL, NULL, NULL, NULL};
    return run(impl, DIR_FWD, &prob, dst, counters);
}

int flashlab_backward(const char *stage, const char *variant, const char *device, const flashlab_problem *p,
                      const float *dout, float *o, float *lse, float *dq, float *dk, float *dv, float *dsinks,
                      flashlab_counters *counters)
{
    const StageImpl *impl = NULL;
    AttnProblem prob;
    int rc = find_stage(stage, variant, device, &impl);
    if (rc == FLASHLAB_OK)
        rc = to_problem(p, dout, &prob);
    if (rc == FLASHLAB_OK && (!dout || !o || !lse || !dq || !dk || !dv || (prob.sinks && !dsinks)))
        rc = fail(FLASHLAB_BAD_INPUT, "dout, o, lse, dq, dk and dv must all be given (and dsinks with sinks)");
    if (rc != FLASHLAB_OK)
        return rc;
    float *const dst[OUT_COUNT] = {o, lse, dq, dk, dv, prob.sinks ? dsinks : NULL};
    return run(impl, DIR_BWD, &prob, dst, counters);
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
