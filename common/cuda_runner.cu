/* cuda_runner.cu — the device side of the runner (runner.h): copies a problem to the GPU, or checks
 * the caller's device arrays (RunnerArrays), gives the stage its inputs in its precision (bf16
 * copies for a bf16 stage, float32 widened from bf16 inputs for a float32 one), runs a CUDA stage
 * on it with a device HBM counter, copies the outputs and the counts back; and times a pass with
 * CUDA events.
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

enum { DEVICE_RUN_MAX_OWNED = 24 };

/* Everything one run holds on the device; zero-initialised means nothing allocated. */
typedef struct {
    AttnProblem p;      /* sizes as given, pointers into device memory */
    AttnTensors t;      /* device outputs (grads only when the backward pass runs) */
    unsigned long long *counter; /* [read, written] */
    void *workspace;
    void *owned[DEVICE_RUN_MAX_OWNED]; /* the arrays this run allocated (copies, conversions, outputs);
                                          the caller's device arrays are not among them */
    int n_owned;
} DeviceRun;

static void device_run_free(DeviceRun *r)
{
    for (int i = 0; i < r->n_owned; i++)
        cudaFree(r->owned[i]);
    cudaFree(r->counter);
    cudaFree(r->workspace);
    memset(r, 0, sizeof *r);
}

/* `bytes` of device memory that r owns (freed by device_run_free); NULL for 0 bytes. */
static int owned_alloc(DeviceRun *r, void **dst, size_t bytes, const char *what, FlError *err)
{
    if (r->n_owned == DEVICE_RUN_MAX_OWNED)
        return fl_fail(err, FL_BAD_INPUT, "%s: more than %d device arrays in one run", what, DEVICE_RUN_MAX_OWNED);
    int rc = fl_cuda_alloc_bytes(dst, bytes, what, err);
    if (rc == FL_OK && *dst)
        r->owned[r->n_owned++] = *dst;
    return rc;
}

/* Replaces slot, a host array of n elements (or NULL, left as it is), with a device copy r owns. */
template <class T>
static int upload_input(DeviceRun *r, const T *&slot, size_t n, const char *what, FlError *err)
{
    const T *host = slot;
    if (!host || n == 0)
        return FL_OK;
    void *dev = NULL;
    slot = NULL;
    int rc = owned_alloc(r, &dev, n * sizeof(T), what, err);
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaMemcpy(dev, host, n * sizeof(T), cudaMemcpyHostToDevice), what, err);
    slot = (const T *)dev;
    return rc;
}

/* A paged problem's block table and sequence lengths (int32). */
static int upload_page_index(DeviceRun *r, FlError *err)
{
    int rc = upload_input(r, r->p.block_table, (size_t)r->p.B * r->p.max_pages, "copying block_table to the device",
                          err);
    if (rc == FL_OK)
        rc = upload_input(r, r->p.seq_lens, (size_t)r->p.B, "copying seq_lens to the device", err);
    return rc;
}

/* Copies the inputs up, in whichever form (float32, bf16) they were given (dout only when the
 * backward pass will run). */
static int upload_inputs(DeviceRun *r, FlError *err)
{
    const AttnProblem host = r->p;
    int rc = upload_input(r, r->p.q, q_numel(&host), "copying q to the device", err);
    if (rc == FL_OK)
        rc = upload_input(r, r->p.k, k_numel(&host), "copying k to the device", err);
    if (rc == FL_OK)
        rc = upload_input(r, r->p.v, v_numel(&host), "copying v to the device", err);
    if (rc == FL_OK)
        rc = upload_input(r, r->p.sinks, (size_t)host.Hq, "copying sinks to the device", err);
    if (rc == FL_OK)
        rc = upload_input(r, r->p.dout, o_numel(&host), "copying dO to the device", err);
    if (rc == FL_OK)
        rc = upload_input(r, r->p.q_bf16, q_numel(&host), "copying q (bf16) to the device", err);
    if (rc == FL_OK)
        rc = upload_input(r, r->p.k_bf16, k_numel(&host), "copying k (bf16) to the device", err);
    if (rc == FL_OK)
        rc = upload_input(r, r->p.v_bf16, v_numel(&host), "copying v (bf16) to the device", err);
    if (rc == FL_OK)
        rc = upload_input(r, r->p.dout_bf16, o_numel(&host), "copying dO (bf16) to the device", err);
    if (rc == FL_OK && host.page_size > 0)
        rc = upload_page_index(r, err);
    return rc;
}

/* ---- inputs in the stage's precision (bf16 for a PRECISION_BF16 stage, else float32) ---------- */

/* One element of another form: bf16 rounded from float32 (the host's rule, common/bf16.h), or
 * float32 widened (exactly) from bf16. */
static __device__ inline void convert_element(float x, uint16_t *y) { *y = bf16_from_float(x); }
static __device__ inline void convert_element(uint16_t x, float *y) { *y = bf16_to_float(x); }

/* y[i] = x[i] in the other form; a grid-stride loop, so any grid covers any n. */
template <class From, class To>
static __global__ void convert_kernel(const From *x, To *y, size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        convert_element(x[i], &y[i]);
}

/* y = x converted, n elements: a grid of at most 4096 blocks of 256 threads. */
template <class From, class To>
static int launch_convert(const From *x, To *y, size_t n, const char *what, FlError *err)
{
    const size_t blocks = (n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096;
    convert_kernel<<<(unsigned)blocks, 256>>>(x, y, n);
    return fl_cuda_launch_status(what, err);
}

/* When dst is NULL and src is not: dst = a new device array (owned by r) of the n elements of src
 * converted to To. */
template <class From, class To>
static int device_converted(DeviceRun *r, const To *&dst, const From *src, size_t n, const char *what,
                            FlError *err)
{
    if (dst || !src || n == 0)
        return FL_OK;
    void *y = NULL;
    int rc = owned_alloc(r, &y, n * sizeof(To), what, err);
    if (rc != FL_OK)
        return rc;
    dst = (const To *)y;
    return launch_convert(src, (To *)y, n, what, err);
}

/* One input in the form the stage reads: a bf16 stage needs h (made from f when missing), a
 * float32 stage f (made from h when missing). */
static int in_stage_precision(DeviceRun *r, int bf16_stage, const float *&f, const uint16_t *&h, size_t n,
                              const char *name, FlError *err)
{
    char what[64];
    snprintf(what, sizeof what, "converting %s to %s", name, bf16_stage ? "bf16" : "float32");
    return bf16_stage ? device_converted(r, h, f, n, what, err) : device_converted(r, f, h, n, what, err);
}

/* q, k, v and dout (when the backward pass runs) in the stage's precision, made once before the
 * first pass; freed by device_run_free. Not counted: the stage's counters start after them. */
static int inputs_in_stage_precision(const StageImpl *impl, DeviceRun *r, FlError *err)
{
    const int bf16 = impl->precision == PRECISION_BF16;
    AttnProblem *p = &r->p;
    int rc = in_stage_precision(r, bf16, p->q, p->q_bf16, q_numel(p), "q", err);
    if (rc == FL_OK)
        rc = in_stage_precision(r, bf16, p->k, p->k_bf16, k_numel(p), "k", err);
    if (rc == FL_OK)
        rc = in_stage_precision(r, bf16, p->v, p->v_bf16, v_numel(p), "v", err);
    if (rc == FL_OK)
        rc = in_stage_precision(r, bf16, p->dout, p->dout_bf16, o_numel(p), "dO", err);
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaDeviceSynchronize(), "converting the inputs to the stage's precision", err);
    return rc;
}

/* ---- the outputs ------------------------------------------------------------------------------ */

/* n floats at x (NULL: nothing) set to NaN (0xFF bytes), so an element a stage never writes shows. */
static int poison(float *x, size_t n, const char *what, FlError *err)
{
    return x ? fl_cuda_status(cudaMemset(x, 0xFF, n * sizeof(float)), what, err) : FL_OK;
}

/* A new poisoned device array of n floats (a step's output). */
static int alloc_poisoned(float **dst, size_t n, const char *what, FlError *err)
{
    int rc = fl_cuda_alloc_floats(dst, n, what, err);
    return rc == FL_OK ? poison(*dst, n, what, err) : rc;
}

/* One output: the caller's device array (in_place) or a new one owned by r, poisoned either way. */
static int output(DeviceRun *r, float *&slot, float *caller, int in_place, size_t n, const char *what,
                  FlError *err)
{
    void *dev = caller;
    int rc = in_place ? FL_OK : owned_alloc(r, &dev, n * sizeof(float), what, err);
    slot = (float *)dev;
    return rc == FL_OK ? poison(slot, n, what, err) : rc;
}

/* The forward's o and lse handed to a backward run alone: used in place, or copied up. */
static int given_o_lse(DeviceRun *r, const AttnTensors *t, int in_place, FlError *err)
{
    const float *o = t->o, *lse = t->lse;
    int rc = FL_OK;
    if (!in_place)
        rc = upload_input(r, o, o_numel(&r->p), "copying o to the device", err);
    if (rc == FL_OK && !in_place)
        rc = upload_input(r, lse, lse_numel(&r->p), "copying lse to the device", err);
    r->t.o = (float *)o, r->t.lse = (float *)lse; /* read only: the backward pass never writes them */
    return rc;
}

/* o and lse (or the given ones), and dq, dk, dv (and dsinks with sinks) when the backward pass runs. */
static int setup_outputs(const AttnTensors *t, const RunnerArrays *a, int with_grads, DeviceRun *r,
                         FlError *err)
{
    const AttnProblem *p = &r->p;
    const int in_place = a->device_memory, given = with_grads && a->given_o_lse;
    int rc = given ? given_o_lse(r, t, in_place, err) : output(r, r->t.o, t->o, in_place, o_numel(p), "allocating o", err);
    if (rc == FL_OK && !given)
        rc = output(r, r->t.lse, t->lse, in_place, lse_numel(p), "allocating lse", err);
    if (rc != FL_OK || !with_grads)
        return rc;
    rc = output(r, r->t.dq, t->dq, in_place, q_numel(p), "allocating dq", err);
    if (rc == FL_OK)
        rc = output(r, r->t.dk, t->dk, in_place, k_numel(p), "allocating dk", err);
    if (rc == FL_OK)
        rc = output(r, r->t.dv, t->dv, in_place, v_numel(p), "allocating dv", err);
    if (rc == FL_OK && p->sinks)
        rc = output(r, r->t.dsinks, t->dsinks, in_place, (size_t)p->Hq, "allocating dsinks", err);
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

/* The outputs back to the host: o and lse unless the caller gave them, the gradients when present. */
static int download_outputs(const AttnProblem *p, const AttnTensors *dev, AttnTensors *host, int with_o_lse,
                            FlError *err)
{
    int rc = with_o_lse ? download(host->o, dev->o, o_numel(p), "copying o to the host", err) : FL_OK;
    if (rc == FL_OK && with_o_lse)
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
    return dir == DIR_BWD && attn_has_dout(p) && impl->backward;
}

/* ---- the caller's device arrays (RunnerArrays.device_memory) ---------------------------------- */

/* FL_OK when x is NULL, or CUDA device (or managed) memory of `device`, 16-byte aligned as
 * cudaMalloc's arrays are (the kernels load 16 bytes at a time); else FL_BAD_INPUT naming it. */
static int check_device_array(const void *x, const char *name, int device, FlError *err)
{
    if (!x)
        return FL_OK;
    cudaPointerAttributes attr;
    cudaError_t status = cudaPointerGetAttributes(&attr, x);
    if (status != cudaSuccess) {
        cudaGetLastError(); /* clear it: the pointer was the problem, not the device */
        return fl_fail(err, FL_BAD_INPUT, "%s (%p) is not CUDA memory: %s", name, x, cudaGetErrorString(status));
    }
    if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
        return fl_fail(err, FL_BAD_INPUT, "%s (%p) is %s, not CUDA device memory", name, x,
                       attr.type == cudaMemoryTypeHost ? "page-locked host memory" : "host memory");
    if (attr.device != device)
        return fl_fail(err, FL_BAD_INPUT, "%s (%p) is on CUDA device %d; the library runs on the calling "
                       "thread's current device, %d", name, x, attr.device, device);
    if ((uintptr_t)x % 16 != 0)
        return fl_fail(err, FL_BAD_INPUT, "%s (%p) is not 16-byte aligned (cudaMalloc's arrays are; a view "
                       "into one at an odd offset may not be)", name, x);
    return FL_OK;
}

/* Every array of p and t, checked by check_device_array. */
static int check_device_arrays(const AttnProblem *p, const AttnTensors *t, FlError *err)
{
    const void *arrays[] = {p->q, p->k, p->v, p->sinks, p->dout, p->q_bf16, p->k_bf16, p->v_bf16, p->dout_bf16,
                            p->block_table, p->seq_lens, t->o, t->lse, t->dq, t->dk, t->dv, t->dsinks};
    const char *names[] = {"q", "k", "v", "sinks", "dout", "q (bf16)", "k (bf16)", "v (bf16)", "dout (bf16)",
                           "block_table", "seq_lens", "o", "lse", "dq", "dk", "dv", "dsinks"};
    int device = 0;
    int rc = fl_cuda_status(cudaGetDevice(&device), "reading the current device", err);
    for (size_t i = 0; rc == FL_OK && i < sizeof arrays / sizeof arrays[0]; i++)
        rc = check_device_array(arrays[i], names[i], device, err);
    return rc;
}

/* The caller's stream, finished before the run starts (NULL: nothing to wait for). */
static int wait_for_stream(void *stream, FlError *err)
{
    if (!stream)
        return FL_OK;
    return fl_cuda_status(cudaStreamSynchronize((cudaStream_t)stream), "waiting for the caller's stream", err);
}

/* ---- one run ---------------------------------------------------------------------------------- */

/* Inputs (copied up unless already on the device, then in the stage's precision), outputs and the
 * counter on the device. */
static int device_run_setup(const StageImpl *impl, const AttnProblem *p, const AttnTensors *t,
                            const RunnerArrays *a, int bwd, DeviceRun *r, FlError *err)
{
    memset(r, 0, sizeof *r);
    r->p = *p;
    if (!bwd)
        r->p.dout = NULL, r->p.dout_bf16 = NULL;
    int rc = a->device_memory ? FL_OK : upload_inputs(r, err);
    if (rc == FL_OK)
        rc = inputs_in_stage_precision(impl, r, err);
    if (rc == FL_OK)
        rc = setup_outputs(t, a, bwd, r, err);
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaMalloc((void **)&r->counter, 2 * sizeof(unsigned long long)),
                            "allocating the HBM counter", err);
    return rc;
}

extern "C" int cuda_runner_run(const StageImpl *impl, Direction dir, const AttnProblem *p, AttnTensors *t,
                               const RunnerArrays *arrays, const RunCtx *opts, RunStats *stats, FlError *err)
{
    if (!cuda_device_available())
        return no_device(impl, err);
    RunStats local;
    if (!stats)
        stats = &local;
    memset(stats, 0, sizeof *stats);
    const int bwd = wants_backward(impl, dir, p), fwd = !(bwd && arrays->given_o_lse);
    DeviceRun r;
    memset(&r, 0, sizeof r);
    RunCtx ctx = device_ctx(opts);
    int rc = arrays->device_memory ? check_device_arrays(p, t, err) : FL_OK;
    if (rc == FL_OK)
        rc = wait_for_stream(arrays->stream, err);
    if (rc == FL_OK)
        rc = device_run_setup(impl, p, t, arrays, bwd, &r, err);
    if (rc == FL_OK && fwd)
        rc = run_pass(impl, DIR_FWD, &r, &ctx, &stats->fwd, &stats->extra_bytes_fwd, err);
    if (rc == FL_OK && bwd)
        rc = run_pass(impl, DIR_BWD, &r, &ctx, &stats->bwd, &stats->extra_bytes_bwd, err);
    if (rc == FL_OK && !arrays->device_memory)
        rc = download_outputs(p, &r.t, t, fwd, err);
    device_run_free(&r);
    return rc;
}

/* ---- timing ------------------------------------------------------------------------------------ */

/* Holds the GPU for `ns` nanoseconds of its global clock and does nothing else (Timing.queued):
 * the work the host launches meanwhile waits behind it in the stream. */
static __global__ void hold_kernel(unsigned long long ns)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do /* one thread on one SM, so a plain spin (no __nanosleep: that needs sm_70) */
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    while (now - start < ns);
}

enum : unsigned long long {
    HOLD_FIRST_NS = 200000ull,    /* 200 us: launching a pass takes the host a few tens of us */
    HOLD_MOST_NS = 200000000ull,  /* 200 ms: a run that still was not queued whole waits inside */
};

/* Whether the GPU was still short of `start` when the run's last call returned, i.e. the whole run
 * (start, kernels, stop) was in the stream before the GPU began it. */
static int run_was_queued(cudaEvent_t start, int *queued, FlError *err)
{
    const cudaError_t e = cudaEventQuery(start);
    *queued = e == cudaErrorNotReady;
    if (e == cudaErrorNotReady)
        (void)cudaGetLastError(); /* "not yet" is an answer, not an error to leave for the next check */
    return e == cudaErrorNotReady ? FL_OK : fl_cuda_status(e, "querying a timing event", err);
}

/* Times warmup + reps calls of body(), each between its own pair of events; the last reps samples
 * in ms. body returns FL_OK or an error code. Queued (runner.h Timing): each call is launched behind
 * hold_kernel, and one the GPU began before the host had launched it all is timed again behind a
 * hold twice as long. */
template <class Body>
static int time_with_events(const Timing *tm, double *samples, Body body, FlError *err)
{
    cudaEvent_t start = NULL, stop = NULL;
    unsigned long long hold_ns = HOLD_FIRST_NS;
    int rc = fl_cuda_status(cudaEventCreate(&start), "creating a timing event", err);
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaEventCreate(&stop), "creating a timing event", err);
    for (int i = 0; rc == FL_OK && i < tm->warmup + tm->reps;) {
        if (tm->queued) {
            hold_kernel<<<1, 1>>>(hold_ns);
            rc = fl_cuda_launch_status("hold_kernel (timing queued)", err);
        }
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaEventRecord(start), "recording a timing event", err);
        if (rc == FL_OK)
            rc = body();
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaEventRecord(stop), "recording a timing event", err);
        int queued = 1;
        if (rc == FL_OK && tm->queued)
            rc = run_was_queued(start, &queued, err);
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaEventSynchronize(stop), "a timed run", err);
        float ms = 0.0f;
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaEventElapsedTime(&ms, start, stop), "reading a timing event", err);
        if (rc != FL_OK)
            break;
        if (!queued) { /* its time holds some of the host's: again, behind a longer hold */
            hold_ns *= 2;
            if (hold_ns > HOLD_MOST_NS)
                rc = fl_fail(err, FL_UNSUPPORTED, "timing queued: a run still began before the host had launched "
                             "all of it behind a %.0f ms hold (it waits for the GPU inside); time it unqueued",
                             (double)HOLD_MOST_NS / 1e6);
            continue;
        }
        if (i >= tm->warmup)
            samples[i - tm->warmup] = ms;
        i++;
    }
    if (start)
        cudaEventDestroy(start);
    if (stop)
        cudaEventDestroy(stop);
    return rc;
}

/* Times the runs (the forward pass, and for DIR_BWD the backward pass after it). */
static int time_runs(const StageImpl *impl, Direction dir, DeviceRun *r, RunCtx *ctx, const Timing *tm,
                     double *samples, FlError *err)
{
    return time_with_events(tm, samples, [&]() {
        int rc = impl->forward(&r->p, &r->t, ctx, err);
        if (rc == FL_OK && dir == DIR_BWD)
            rc = impl->backward(&r->p, &r->t, ctx, err);
        return rc;
    }, err);
}

/* runner_time has checked tm (runner.c timing_valid). */
extern "C" int cuda_runner_time(const StageImpl *impl, Direction dir, const AttnProblem *p,
                                const RunCtx *opts, const Timing *tm, double *median, FlError *err)
{
    if (!cuda_device_available())
        return no_device(impl, err);
    double *samples = (double *)malloc(sizeof(double) * (size_t)tm->reps);
    if (!samples)
        return fl_fail(err, FL_BAD_INPUT, "out of memory for %d timing samples", tm->reps);
    DeviceRun r;
    RunCtx ctx = device_ctx(opts); /* hbm_dev stays NULL: counting off while timing */
    ctx.rank_counters = NULL;
    const RunnerArrays host_arrays = {0};
    const AttnTensors new_outputs = {0};
    int rc = device_run_setup(impl, p, &new_outputs, &host_arrays, wants_backward(impl, dir, p), &r, err);
    if (rc == FL_OK) { /* one workspace, the larger of the passes' */
        size_t bytes = pass_workspace_bytes(impl, DIR_FWD, &r, &ctx);
        if (dir == DIR_BWD && pass_workspace_bytes(impl, DIR_BWD, &r, &ctx) > bytes)
            bytes = pass_workspace_bytes(impl, DIR_BWD, &r, &ctx);
        rc = alloc_workspace_bytes(impl, &r, bytes, err);
    }
    ctx.workspace = r.workspace;
    if (rc == FL_OK)
        rc = time_runs(impl, dir, &r, &ctx, tm, samples, err);
    if (rc == FL_OK)
        *median = median_ms(samples, tm->reps);
    device_run_free(&r);
    free(samples);
    return rc;
}

/* ---- a step of another kind (runner.h RunnerStep): inputs up, one output back ------------------- */

typedef struct {
    StepInputs in; /* device copies of the step's inputs (and their bf16 copies for a bf16 stage) */
    float *out;
    unsigned long long *counter;
    void *workspace;
} StepDeviceRun;

static void step_run_free(StepDeviceRun *r)
{
    for (int i = 0; i < RUNNER_STEP_MAX_INPUTS; i++)
        cudaFree((void *)r->in.f32[i]), cudaFree((void *)r->in.bf16[i]);
    cudaFree(r->out);
    cudaFree(r->counter);
    cudaFree(r->workspace);
    memset(r, 0, sizeof *r);
}

/* The bf16 copy of device input i (n elements) for a bf16 stage (runner.h StepInputs). */
static int step_input_bf16(StepDeviceRun *r, int i, size_t n, const char *name, FlError *err)
{
    char what[96];
    snprintf(what, sizeof what, "converting %s to bf16", name);
    void *y = NULL;
    int rc = fl_cuda_alloc_bytes(&y, n * sizeof(uint16_t), what, err);
    r->in.bf16[i] = (const uint16_t *)y;
    return rc != FL_OK || n == 0 ? rc : launch_convert(r->in.f32[i], (uint16_t *)y, n, what, err);
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
        r->in.f32[i] = dev;
        if (rc == FL_OK && impl->precision == PRECISION_BF16)
            rc = step_input_bf16(r, i, s->in_numel[i], s->in_name[i], err);
    }
    if (rc == FL_OK && impl->precision == PRECISION_BF16)
        rc = fl_cuda_status(cudaDeviceSynchronize(), "converting the step's inputs to bf16", err);
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
        rc = s->fn(&r.in, r.out, &ctx, s->arg, err);
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaDeviceSynchronize(), "the step", err);
    if (rc == FL_OK)
        rc = counter_read(r.counter, &stats->fwd, err);
    if (rc == FL_OK)
        rc = download(s->out, r.out, s->out_numel, "copying the output to the host", err);
    step_run_free(&r);
    return rc;
}

/* runner_time_step has checked tm. */
extern "C" int cuda_runner_time_step(const StageImpl *impl, const RunnerStep *s, const RunCtx *opts,
                                     const Timing *tm, double *median, FlError *err)
{
    if (!cuda_device_available())
        return no_device(impl, err);
    double *samples = (double *)malloc(sizeof(double) * (size_t)tm->reps);
    if (!samples)
        return fl_fail(err, FL_BAD_INPUT, "out of memory for %d timing samples", tm->reps);
    StepDeviceRun r;
    RunCtx ctx = device_ctx(opts); /* counting off while timing */
    int rc = step_run_setup(impl, s, &r, err);
    ctx.workspace = r.workspace;
    if (rc == FL_OK)
        rc = time_with_events(tm, samples, [&]() { return s->fn(&r.in, r.out, &ctx, s->arg, err); }, err);
    if (rc == FL_OK)
        *median = median_ms(samples, tm->reps);
    step_run_free(&r);
    free(samples);
    return rc;
}
