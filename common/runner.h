/* runner.h — running one stage implementation on one problem, on its device.
 *
 * The runner is the only place that knows about devices: for a CPU implementation it calls the
 * stage directly; for a CUDA implementation (common/cuda_runner.cu) it copies the problem to the
 * device (unless it is there already: RunnerArrays), runs, counts through a device counter, and
 * copies the outputs back. It also allocates
 * the stage's workspace. Outputs in t must be allocated by the caller (poisoned). */
#ifndef FLASHLAB_RUNNER_H
#define FLASHLAB_RUNNER_H

#include "attn.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    HbmCounter fwd, bwd;     /* bytes counted by each pass (bwd zero when not run) */
    size_t extra_bytes_fwd, extra_bytes_bwd; /* workspace_bytes of each pass */
} RunStats;

/* Features p asks for in direction dir (a forward run ignores dout) that impl lacks; 0 = it can run. */
unsigned runner_missing_features(const StageImpl *impl, Direction dir, const AttnProblem *p);

/* Whether impl runs p's head dims: always for a stage with head_dims {0, 0}; otherwise only
 * d == dv with d one of impl->head_dims (stage 12: 64 or 128). runner_run and runner_time refuse
 * the others with FL_UNSUPPORTED and one line naming the dims the stage runs. */
int runner_head_dims_ok(const StageImpl *impl, const AttnProblem *p);

/* FL_OK when impl runs p in dir; else FL_UNSUPPORTED naming the missing feature and the stage that
 * adds it, or the head dims impl runs (or another kind's stage: one line saying which). */
int runner_check(const StageImpl *impl, Direction dir, const AttnProblem *p, FlError *err);

/* NaN-poisoned outputs of p (o, lse, and the gradients and dsinks p asks for) in out, pointed to by
 * t; FL_OK, or FL_BAD_INPUT when out of memory (nothing left allocated). runner_outputs_free frees. */
int runner_outputs_alloc(const AttnProblem *p, Tensor out[], AttnTensors *t, FlError *err);
void runner_outputs_free(Tensor out[]);

/* opts (may be NULL) with unset fields defaulted: sram_bytes = FLASHLAB_DEFAULT_SRAM_BYTES,
 * threads = default_thread_count(). The counters and workspace are left as they are. */
RunCtx runner_ctx_defaults(const RunCtx *opts);

/* Runs the forward pass, and the backward pass when p asks for it (attn_has_dout) and dir == DIR_BWD.
 * Returns FL_OK, FL_UNSUPPORTED (message names the stage that adds the missing feature, or the
 * head dims the stage runs), FL_NO_DEVICE, or the stage's error. ctx->hbm / hbm_dev are managed by
 * the runner. For a stage whose precision is PRECISION_BF16 the runner hands it p with q_bf16,
 * k_bf16, v_bf16 (and dout_bf16 when the backward pass runs) set: bf16_from_float of the float32
 * inputs (common/bf16.h), made before the forward pass, in the stage's memory (host or device), not
 * counted, freed with the run. */
int runner_run(const StageImpl *impl, Direction dir, const AttnProblem *p, AttnTensors *t,
               const RunCtx *opts, RunStats *stats, FlError *err);

/* How the caller's arrays reach runner_run_arrays (libflashlab, common/api.c). All zero is
 * runner_run: host arrays, and a backward run starts with the forward pass. */
typedef struct {
    int device_memory; /* every pointer of p and t is CUDA device memory of the current device, 16-byte
                          aligned: a CUDA stage runs on it in place (nothing is copied; the outputs are
                          NaN-poisoned there first); a CPU stage refuses it (FL_BAD_INPUT) */
    int given_o_lse;   /* with DIR_BWD: t->o and t->lse already hold the forward's outputs, which only
                          the backward pass, run alone, reads; they are inputs here, never written */
    void *stream;      /* a cudaStream_t that a CUDA stage's run waits for (cudaStreamSynchronize)
                          before it starts; NULL: none. The stage's kernels run on the legacy default
                          stream and the run waits for them before it returns */
} RunnerArrays;

/* runner_run with the caller's arrays described by arrays (NULL = all zero). Either form of an
 * input may be given: the float32 q, k, v, dout or the bf16 q_bf16, k_bf16, v_bf16, dout_bf16
 * (attn.h); the runner makes the one the stage reads from the other when it is missing: bf16
 * rounded from float32 for a bf16 stage, float32 widened from bf16 (exactly) for a float32 stage,
 * in the stage's memory, not counted, freed with the run. */
int runner_run_arrays(const StageImpl *impl, Direction dir, const AttnProblem *p, AttnTensors *t,
                      const RunnerArrays *arrays, const RunCtx *opts, RunStats *stats, FlError *err);

/* Runs impl once on a small problem with p's head dims, head group and options (one sequence, one
 * kv head, at most 64 queries and keys, zero inputs; paged problems are passed through untouched)
 * and returns what that run returned. A stage that refuses p's head dims or tile configuration
 * (SRAM size, shared memory) thus refuses before the caller allocates large outputs. */
int runner_preflight(const StageImpl *impl, Direction dir, const AttnProblem *p, const RunCtx *opts,
                     FlError *err);

/* How a run is timed: warmup untimed runs, then reps timed ones, of which the median is reported.
 * queued (CUDA; `flashlab bench --queued`): each timed run is launched while a kernel that only
 * waits holds the GPU, so that its start event, its kernels and its stop event are all in the
 * stream before the GPU reaches them, and the time between the events is the GPU's alone, without
 * the host's launch of the first kernel (which a run of a few tens of microseconds notices, and a
 * CUDA graph or a busy serving loop would not pay). Each run is checked to have been queued
 * whole; a run that was not is timed again behind a longer hold. */
typedef struct {
    int warmup, reps;
    int queued;
} Timing;

/* Median wall time in ms of t->reps timed runs after t->warmup runs, counting off. DIR_FWD times the
 * forward pass; DIR_BWD times forward + backward together (each run: the forward pass, then the
 * backward pass reading that forward's o and lse), as the FlashAttention benchmarks report it.
 * CPU: timer.h clock. CUDA: CUDA events around both passes, inputs already on the device, copies
 * not timed. One workspace, the larger of the two passes', serves both. A bf16 stage's inputs are
 * converted once, before the first run: the timed runs read bf16 directly. */
int runner_time(const StageImpl *impl, Direction dir, const AttnProblem *p, const RunCtx *opts,
                const Timing *timing, double *median, FlError *err);

/* A step of a kind other than attention (kind_mla.c): a few float32 inputs, one float32 output,
 * a function that computes it. The runner runs it where impl runs: on the CPU with the host arrays;
 * on the GPU after copying the inputs up (the output poisoned there), with a device counter, then
 * copies the output back. Nothing here knows what the arrays mean. */
enum { RUNNER_STEP_MAX_INPUTS = 16 };
/* The inputs as fn receives them: float32 always; for a PRECISION_BF16 stage on CUDA also bf16 copies
 * (bf16_from_float, made on the device once before the first step, not counted, not timed), as
 * runner_run does for a bf16 attention stage. On the CPU bf16[] is NULL: a CPU bf16 stage rounds
 * its own copies. */
typedef struct {
    const float *f32[RUNNER_STEP_MAX_INPUTS];
    const uint16_t *bf16[RUNNER_STEP_MAX_INPUTS];
} StepInputs;
typedef int (*RunnerStepFn)(const StepInputs *in, float *out, RunCtx *ctx, const void *arg, FlError *err);
typedef struct {
    int n_in;
    const float *in[RUNNER_STEP_MAX_INPUTS]; /* host */
    size_t in_numel[RUNNER_STEP_MAX_INPUTS];
    const char *in_name[RUNNER_STEP_MAX_INPUTS]; /* for messages: "x.npy" */
    float *out;                                 /* host, out_numel floats */
    size_t out_numel;
    size_t workspace_bytes;                     /* scratch the step needs (the "extra memory") */
    RunnerStepFn fn;
    const void *arg;                            /* handed to fn unchanged */
} RunnerStep;

/* Runs the step once, counting: stats->fwd gets the counts, extra_bytes_fwd the workspace. */
int runner_run_step(const StageImpl *impl, const RunnerStep *s, const RunCtx *opts, RunStats *stats,
                    FlError *err);
/* Median wall time in ms of timed steps (Timing as runner_time), counting off. */
int runner_time_step(const StageImpl *impl, const RunnerStep *s, const RunCtx *opts, const Timing *timing,
                     double *median, FlError *err);

/* CUDA side (common/cuda_runner.cu, or common/cuda_runner_none.c when built without CUDA). */
int cuda_device_available(void); /* 1 if a usable CUDA device exists; any error counts as none */
const char *cuda_device_description(void); /* e.g. "NVIDIA H100 80GB HBM3 (sm_90)" or "none" */
int cuda_runner_run(const StageImpl *impl, Direction dir, const AttnProblem *p, AttnTensors *t,
                    const RunnerArrays *arrays, const RunCtx *opts, RunStats *stats, FlError *err);
int cuda_runner_time(const StageImpl *impl, Direction dir, const AttnProblem *p, const RunCtx *opts,
                     const Timing *timing, double *median, FlError *err);
int cuda_runner_run_step(const StageImpl *impl, const RunnerStep *s, const RunCtx *opts, RunStats *stats,
                         FlError *err);
int cuda_runner_time_step(const StageImpl *impl, const RunnerStep *s, const RunCtx *opts, const Timing *timing,
                          double *median, FlError *err);

#ifdef __cplusplus
}
#endif
#endif
