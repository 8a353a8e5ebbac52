/* cuda_runner.cu — the device side of the runner (runner.h): copies a problem to the GPU (and, for
 * a bf16 stage, makes the bf16 copies of its inputs there), runs a CUDA stage on it with a device
 * HBM counter, copies the outputs and the counts back; and times a pass with CUDA events.
 * runner.c has already checked the stage's features and head dims.
 *
 * Every CUDA call is checked; every path frees what it allocated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "cuda_util.h"
#include "runner.h"
#include "timer.h"

/* ---- the device ----------------------------------------------------------------------------- */

extern "C" int cuda_device_available(void)
{
    int count = 0;
    /* without a driver this returns an error rather than 0 devices: both mean "none" */
    if (cudaGetDeviceCount(&count) != cudaSuccess)
        return 0;
    return count > 0;
}

extern "C" const char *cuda_device_description(void)
{
    static char text[320];
    cudaDeviceProp prop;
    if (!cuda_device_available() || cudaGetDeviceProperties(&prop, 0) != cudaSuccess)
        return "none";
    snprintf(text, sizeof text, "%s (sm_%d%d, %d SMs, %.0f GiB)", prop.name, prop.major, prop.minor,
             prop.multiProcessorCount, (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return text;
}

static int no_device(const StageImpl *impl, FlError *err)
{
    return fl_fail(err, FL_NO_DEVICE, "stage %s (%s, cuda): no CUDA device available", impl->stage,
                   impl->name);
}

/* ---- the problem and its outputs on the device ---------------------------------------------- */

static size_t q_numel(const AttnProblem *p) { return (size_t)p->B * p->Hq * p->Tq * p->d; }
static size_t k_numel(const AttnProblem *p) { return attn_k_numel(p); }
static size_t v_numel(const AttnProblem *p) { return attn_v_numel(p); }
static size_t o_numel(const AttnProblem *p) { return (size_t)p->B * p->Hq * p->Tq * p->dv; }
static size_t lse_numel(const AttnProblem *p) { return (size_t)p->B * p->Hq * p->Tq; }

/* Everything one run holds on the device; zero-initialised means nothing allocated. */
typedef struct {
    AttnProblem p;      /* sizes as given, pointers into device memory */
    AttnTensors t;      /* device outputs (grads only when the backward pass runs) */
    unsigned long long *counter; /* [read, written] */
    void *workspace;
} DeviceRun;

static void device_run_free(DeviceRun *r)
{
    cudaFree((void *)r->p.q);
    cudaFree((void *)r->p.k);
    cudaFree((void *)r->p.v);
    cudaFree((void *)r->p.sinks);
    cudaFree((void *)r->p.dout);
    cudaFree((void *)r->p.block_table);
    cudaFree((void *)r->p.seq_lens);
    cudaFree((void *)r->p.q_bf16);
    cudaFree((void *)r->p.k_bf16);
    cudaFree((void *)r->p.v_bf16);
    cudaFree((void *)r->p.dout_bf16);
    cudaFree(r->t.o);
    cudaFree(r->t.lse);
    cudaFree(r->t.dq);
    cudaFree(r->t.dk);
    cudaFree(r->t.dv);
    cudaFree(r->t.dsinks);
    cudaFree(r->counter);
    cudaFree(r->workspace);
    memset(r, 0, sizeof *r);
}

/* A paged problem's block table and sequence lengths (int32). */
static int upload_page_index(const AttnProblem *host, DeviceRun *r, FlError *err)
{
    void *table = NULL, *lens = NULL;
    int rc = fl_cuda_upload_bytes(&table, host->block_table,
                                  (size_t)host->B * host->max_pages * sizeof(int32_t),
                                  "copying block_table to the device", err);
    r->p.block_table = (const int32_t *)table;
    if (rc == FL_OK)
        rc = fl_cuda_upload_bytes(&lens, host->seq_lens, (size_t)host->B * sizeof(int32_t),
                                  "copying seq_lens to the device", err);
    r->p.seq_lens = (const int32_t *)lens;
    return rc;
}

/* Copies the inputs up (dout only when the backward pass will run). */
static int upload_inputs(const AttnProblem *host, int with_dout, DeviceRun *r, FlError *err)
{
    float *q, *k, *v, *sinks = NULL, *dout = NULL;
    r->p = *host;
    r->p.q = r->p.k = r->p.v = r->p.sinks = r->p.dout = NULL;
    r->p.block_table = r->p.seq_lens = NULL;
    r->p.q_bf16 = r->p.k_bf16 = r->p.v_bf16 = r->p.dout_bf16 = NULL;
    int rc = fl_cuda_upload_floats(&q, host->q, q_numel(host), "copying q to the device", err);
    r->p.q = q;
    if (rc == FL_OK)
        rc = fl_cuda_upload_floats(&k, host->k, k_numel(host), "copying k to the device", err);
    if (rc == FL_OK)
        r->p.k = k;
    if (rc == FL_OK)
        rc = fl_cuda_upload_floats(&v, host->v, v_numel(host), "copying v to the device", err);
    if (rc == FL_OK)
        r->p.v = v;
    if (rc == FL_OK && host->sinks)
        rc = fl_cuda_upload_floats(&sinks, host->sinks, (size_t)host->Hq, "copying sinks to the device", err);
    r->p.sinks = sinks;
    if (rc == FL_OK && with_dout && host->dout)
        rc = fl_cuda_upload_floats(&dout, host->dout, o_numel(host), "copying dO to the device", err);
    r->p.dout = dout;
    if (rc == FL_OK && host->page_size > 0)
        rc = upload_page_index(host, r, err);
    return rc;
}

/* ---- bf16 inputs (a stage whose precision is PRECISION_BF16) --------------------------------- */

/* y[i] = bf16_from_float(x[i]), the same rounding rule as the host (common/bf16.h); a grid-stride
 * loop, so any grid covers any n. */
static __global__ void bf16_from_float_kernel(const float *x, uint16_t *y, size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = bf16_from_float(x[i]);
}

/* *dst = a new device array of the n bf16 patterns of the device array x (NULL when x is NULL). */
static int device_bf16(const uint16_t **dst, const float *x, size_t n, const char *what, FlError *err)
{
    *dst = NULL;
    if (!x || n == 0)
        return FL_OK;
    void *y = NULL;
    int rc = fl_cuda_alloc_bytes(&y, n * sizeof(uint16_t), what, err);
    if (rc != FL_OK)
        return rc;
    *dst = (const uint16_t *)y;
    const int threads = 256;
    const size_t blocks = (n + threads - 1) / threads < 4096 ? (n + threads - 1) / threads : 4096;
    bf16_from_float_kernel<<<(unsigned)blocks, threads>>>(x, (uint16_t *)y, n);
    return fl_cuda_launch_status(what, err);
}

/* The bf16 copies of the device inputs q, k, v (and dout when it was uploaded), made once after
 * the upload; freed by device_run_free. Not counted: the stage's counters start after them. */
static int convert_inputs_bf16(DeviceRun *r, FlError *err)
{
    int rc = device_bf16(&r->p.q_bf16, r->p.q, q_numel(&r->p), "converting q to bf16", err);
    if (rc == FL_OK)
        rc = device_bf16(&r->p.k_bf16, r->p.k, k_numel(&r->p), "converting k to bf16", err);
    if (rc == FL_OK)
        rc = device_bf16(&r->p.v_bf16, r->p.v, v_numel(&r->p), "converting v to bf16", err);
    if (rc == FL_OK)
        rc = device_bf16(&r->p.dout_bf16, r->p.dout, o_numel(&r->p), "converting dO to bf16", err);
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaDeviceSynchronize(), "converting the inputs to bf16", err);
    return rc;
}

/* One poisoned device output (0xFF bytes = NaN), so an element the stage never writes fails the check. */
static int alloc_poisoned(float **dst, size_t n, const char *what, FlError *err)
{
    int rc = fl_cuda_alloc_floats(dst, n, what, err);
    if (rc == FL_OK && *dst)
        rc = fl_cuda_status(cudaMemset(*dst, 0xFF, n * sizeof(float)), what, err);
    return rc;
}

/* o and lse always; dq, dk, dv (and dsinks with sinks) when the backward pass runs. */
static int alloc_outputs(const AttnProblem *p, int with_grads, DeviceRun *r, FlError *err)
{
    int rc = alloc_poisoned(&r->t.o, o_numel(p), "allocating o", err);
    if (rc == FL_OK)
        rc = alloc_poisoned(&r->t.lse, lse_numel(p), "allocating lse", err);
    if (rc != FL_OK || !with_grads)
        return rc;
    rc = alloc_poisoned(&r->t.dq, q_numel(p), "allocating dq", err);
    if (rc == FL_OK)
        rc = alloc_poisoned(&r->t.dk, k_numel(p), "allocating dk", err);
    if (rc == FL_OK)
        rc = alloc_poisoned(&r->t.dv, v_numel(p), "allocating dv", err);
    if (rc == FL_OK && p->sinks)
        rc = alloc_poisoned(&r->t.dsinks, (size_t)p->Hq, "allocating dsinks", err);
    return rc;
}

/* `bytes` of device scratch in *ws, replacing the previous one (NULL for 0 bytes). */
static int alloc_scratch(const StageImpl *impl, void **ws, size_t bytes, FlError *err)
{
    cudaFree(*ws);
    *ws = NULL;
    if (bytes == 0)
        return FL_OK;
    cudaError_t status = cudaMalloc(ws, bytes);
    if (status != cudaSuccess) {
        *ws = NULL;
        return fl_fail(err, FL_BAD_INPUT, "CUDA error in allocating %zu bytes of workspace for stage %s (%s): %s",
                       bytes, impl->stage, impl->name, cudaGetErrorString(status));
    }
    return FL_OK;
}

static int alloc_workspace_bytes(const StageImpl *impl, DeviceRun *r, size_t bytes, FlError *err)
{
    return alloc_scratch(impl, &r->workspace, bytes, err);
}

/* The device HBM counter [read, written]: zeroed before a counted pass, read back after it. */
static int counter_zero(unsigned long long *counter, FlError *err)
{
    return fl_cuda_status(cudaMemset(counter, 0, 2 * sizeof(unsigned long long)),
                          "zeroing the HBM counter", err);
}

static int counter_read(const unsigned long long *counter, HbmCounter *counted, FlError *err)
{
    unsigned long long host[2];
    int rc = fl_cuda_status(cudaMemcpy(host, counter, sizeof host, cudaMemcpyDeviceToHost),
                            "reading the HBM counter", err);
    counted->bytes_read = host[HBM_READ];
    counted->bytes_written = host[HBM_WRITTEN];
    return rc;
}

static size_t pass_workspace_bytes(const StageImpl *impl, Direction dir, const DeviceRun *r,
                                   const RunCtx *ctx)
{
    return impl->workspace_bytes ? impl->workspace_bytes(&r->p, ctx, dir) : 0;
}

/* The stage's scratch for one pass, replacing the previous one (NULL for 0 bytes). */
static int alloc_workspace(const StageImpl *impl, Direction dir, DeviceRun *r, const RunCtx *ctx,
                           size_t *bytes_out, FlError *err)
{
    size_t bytes = pass_workspace_bytes(impl, dir, r, ctx);
    if (bytes_out)
        *bytes_out = bytes;
    return alloc_workspace_bytes(impl, r, bytes, err);
}

static RunCtx device_ctx(const RunCtx *opts)
{
    RunCtx ctx = runner_ctx_defaults(opts);
    ctx.hbm = NULL;     /* CUDA stages count into hbm_dev, never into host memory */
    ctx.hbm_dev = NULL;
    ctx.workspace = NULL;
    return ctx;
}

/* One pass with its own workspace; with a counter, zeroes it first and reads it back after. */
static int run_pass(const StageImpl *impl, Direction dir, DeviceRun *r, RunCtx *ctx,
                    HbmCounter *counted, size_t *extra_bytes, FlError *err)
{
    int rc = alloc_workspace(impl, dir, r, ctx, extra_bytes, err);
    if (rc != FL_OK)
        return rc;
    ctx->workspace = r->workspace;
    ctx->hbm_dev = counted ? r->counter : NULL;
    if (counted)
        rc = counter_zero(r->counter, err);
    AttnFn fn = dir == DIR_FWD ? impl->forward : impl->backward;
    if (rc == FL_OK)
        rc = fn(&r->p, &r->t, ctx, err);
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaDeviceSynchronize(), dir == DIR_FWD ? "the forward pass" : "the backward pass", err);
    if (rc == FL_OK && counted)
        rc = counter_read(r->counter, counted, err);
    ctx->workspace = NULL;
    ctx->hbm_dev = NULL;
    return rc;
}

static int download(float *host, const float *dev, size_t n, const char *what, FlError *err)
{
    if (!host || !dev || n == 0)
        return FL_OK;
    return fl_cuda_status(cudaMemcpy(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost), what, err);
}

static int download_outputs(const AttnProblem *p, const AttnTensors *dev, AttnTensors *host,
                            FlError *err)
{
    int rc = download(host->o, dev->o, o_numel(p), "copying o to the host", err);
    if (rc == FL_OK)
        rc = download(host->lse, dev->lse, lse_numel(p), "copying lse to the host", err);
    if (rc == FL_OK)
        rc = download(host->dq, dev->dq, q_numel(p), "copying dq to the host", err);
    if (rc == FL_OK)
        rc = download(host->dk, dev->dk, k_numel(p), "copying dk to the host", err);
    if (rc == FL_OK)
        rc = download(host->dv, dev->dv, v_numel(p), "copying dv to the host", err);
    if (rc == FL_OK)
        rc = download(host->dsinks, dev->dsinks, (size_t)p->Hq, "copying dsinks to the host", err);
    return rc;
}

static int wants_backward(const StageImpl *impl, Direction dir, const AttnProblem *p)
{
    return dir == DIR_BWD && p->dout && impl->backward;
}

/* Inputs (and a bf16 stage's bf16 copies), outputs and the counter on the device. */
static int device_run_setup(const StageImpl *impl, Direction dir, const AttnProblem *p, DeviceRun *r,
                            FlError *err)
{
    int bwd = wants_backward(impl, dir, p);
    memset(r, 0, sizeof *r);
    int rc = upload_inputs(p, bwd, r, err);
    if (rc == FL_OK && impl->precision == PRECISION_BF16)
        rc = convert_inputs_bf16(r, err);
    if (rc == FL_OK)
        rc = alloc_outputs(p, bwd, r, err);
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaMalloc((void **)&r->counter, 2 * sizeof(unsigned long long)),
                            "allocating the HBM counter", err);
    return rc;
}

extern "C" int cuda_runner_run(const StageImpl *impl, Direction dir, const AttnProblem *p,
                               AttnTensors *t, const RunCtx *opts, RunStats *stats, FlError *err)
{
    if (!cuda_device_available())
        return no_device(impl, err);
    RunStats local;
    if (!stats)
        stats = &local;
    memset(stats, 0, sizeof *stats);
    DeviceRun r;
    RunCtx ctx = device_ctx(opts);
    int rc = device_run_setup(impl, dir, p, &r, err);
    if (rc == FL_OK)
        rc = run_pass(impl, DIR_FWD, &r, &ctx, &stats->fwd, &stats->extra_bytes_fwd, err);
    if (rc == FL_OK && wants_backward(impl, dir, p))
        rc = run_pass(impl, DIR_BWD, &r, &ctx, &stats->bwd, &stats->extra_bytes_bwd, err);
    if (rc == FL_OK)
        rc = download_outputs(p, &r.t, t, err);
    device_run_free(&r);
    return rc;
}

/* ---- timing ------------------------------------------------------------------------------------ */

/* Times warmup + reps calls of body(), each between its own pair of events; the last reps
 * samples in ms. body returns FL_OK or an error code. */
template <class Body>
static int time_with_events(int warmup, int reps, double *samples, Body body, FlError *err)
{
    cudaEvent_t start = NULL, stop = NULL;
    int rc = fl_cuda_status(cudaEventCreate(&start), "creating a timing event", err);
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaEventCreate(&stop), "creating a timing event", err);
    for (int i = 0; rc == FL_OK && i < warmup + reps; i++) {
        rc = fl_cuda_status(cudaEventRecord(start), "recording a timing event", err);
        if (rc == FL_OK)
            rc = body();
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaEventRecord(stop), "recording a timing event", err);
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaEventSynchronize(stop), "a timed run", err);
        float ms = 0.0f;
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaEventElapsedTime(&ms, start, stop), "reading a timing event", err);
        if (rc == FL_OK && i >= warmup)
            samples[i - warmup] = ms;
    }
    if (start)
        cudaEventDestroy(start);
    if (stop)
        cudaEventDestroy(stop);
    return rc;
}

/* Times `reps` runs (the forward pass, and for DIR_BWD the backward pass after it). */
static int time_runs(const StageImpl *impl, Direction dir, DeviceRun *r, RunCtx *ctx, int warmup,
                     int reps, double *samples, FlError *err)
{
    return time_with_events(warmup, reps, samples, [&]() {
        int rc = impl->forward(&r->p, &r->t, ctx, err);
        if (rc == FL_OK && dir == DIR_BWD)
            rc = impl->backward(&r->p, &r->t, ctx, err);
        return rc;
    }, err);
}

extern "C" int cuda_runner_time(const StageImpl *impl, Direction dir, const AttnProblem *p,
                                const RunCtx *opts, int warmup, int reps, double *median, FlError *err)
{
    if (!cuda_device_available())
        return no_device(impl, err);
    if (reps < 1 || warmup < 0)
        return fl_fail(err, FL_BAD_INPUT, "cuda_runner_time: need reps >= 1 and warmup >= 0 (got %d, %d)",
                       reps, warmup);
    double *samples = (double *)malloc(sizeof(double) * (size_t)reps);
    if (!samples)
        return fl_fail(err, FL_BAD_INPUT, "out of memory for %d timing samples", reps);
    DeviceRun r;
    RunCtx ctx = device_ctx(opts); /* hbm_dev stays NULL: counting off while timing */
    ctx.rank_counters = NULL;
    int rc = device_run_setup(impl, dir, p, &r, err);
    if (rc == FL_OK) { /* one workspace, the larger of the passes' */
        size_t bytes = pass_workspace_bytes(impl, DIR_FWD, &r, &ctx);
        if (dir == DIR_BWD && pass_workspace_bytes(impl, DIR_BWD, &r, &ctx) > bytes)
            bytes = pass_workspace_bytes(impl, DIR_BWD, &r, &ctx);
        rc = alloc_workspace_bytes(impl, &r, bytes, err);
    }
    ctx.workspace = r.workspace;
    if (rc == FL_OK)
        rc = time_runs(impl, dir, &r, &ctx, warmup, reps, samples, err);
    if (rc == FL_OK)
        *median = median_ms(samples, reps);
    device_run_free(&r);
    free(samples);
    return rc;
}

/* ---- a step of another kind (runner.h RunnerStep): inputs up, one output back ------------------- */

typedef struct {
    const float *in[RUNNER_STEP_MAX_INPUTS]; /* device copies of the step's inputs */
    float *out;
    unsigned long long *counter;
    void *workspace;
} StepDeviceRun;

static void step_run_free(StepDeviceRun *r)
{
    for (int i = 0; i < RUNNER_STEP_MAX_INPUTS; i++)
        cudaFree((void *)r->in[i]);
    cudaFree(r->out);
    cudaFree(r->counter);
    cudaFree(r->workspace);
    memset(r, 0, sizeof *r);
}

/* Inputs up, the output poisoned, the counter and the workspace allocated. */
static int step_run_setup(const StageImpl *impl, const RunnerStep *s, StepDeviceRun *r, FlError *err)
{
    memset(r, 0, sizeof *r);
    int rc = FL_OK;
    for (int i = 0; i < s->n_in && rc == FL_OK; i++) {
        float *dev = NULL;
        char what[96];
        snprintf(what, sizeof what, "copying %s to the device", s->in_name[i]);
        rc = fl_cuda_upload_floats(&dev, s->in[i], s->in_numel[i], what, err);
        r->in[i] = dev;
    }
    if (rc == FL_OK)
        rc = alloc_poisoned(&r->out, s->out_numel, "allocating the output", err);
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaMalloc((void **)&r->counter, 2 * sizeof(unsigned long long)),
                            "allocating the HBM counter", err);
    if (rc == FL_OK)
        rc = alloc_scratch(impl, &r->workspace, s->workspace_bytes, err);
    return rc;
}

extern "C" int cuda_runner_run_step(const StageImpl *impl, const RunnerStep *s, const RunCtx *opts,
                                    RunStats *stats, FlError *err)
{
    if (!cuda_device_available())
        return no_device(impl, err);
    StepDeviceRun r;
    RunCtx ctx = device_ctx(opts);
    stats->extra_bytes_fwd = s->workspace_bytes;
    int rc = step_run_setup(impl, s, &r, err);
    ctx.workspace = r.workspace;
    ctx.hbm_dev = r.counter;
    if (rc == FL_OK)
        rc = counter_zero(r.counter, err);
    if (rc == FL_OK)
        rc = s->fn(r.in, r.out, &ctx, s->arg, err);
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaDeviceSynchronize(), "the step", err);
    if (rc == FL_OK)
        rc = counter_read(r.counter, &stats->fwd, err);
    if (rc == FL_OK)
        rc = download(s->out, r.out, s->out_numel, "copying the output to the host", err);
    step_run_free(&r);
    return rc;
}

extern "C" int cuda_runner_time_step(const StageImpl *impl, const RunnerStep *s, const RunCtx *opts, int warmup,
                                     int reps, double *median, FlError *err)
{
    if (!cuda_device_available())
        return no_device(impl, err);
    double *samples = (double *)malloc(sizeof(double) * (size_t)reps);
    if (!samples)
        return fl_fail(err, FL_BAD_INPUT, "out of memory for %d timing samples", reps);
    StepDeviceRun r;
    RunCtx ctx = device_ctx(opts); /* counting off while timing */
    int rc = step_run_setup(impl, s, &r, err);
    ctx.workspace = r.workspace;
    if (rc == FL_OK)
        rc = time_with_events(warmup, reps, samples, [&]() { return s->fn(r.in, r.out, &ctx, s->arg, err); }, err);
    if (rc == FL_OK)
        *median = median_ms(samples, reps);
    step_run_free(&r);
    free(samples);
    return rc;
}
