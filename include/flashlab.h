/* flashlab.h — the public C interface of libflashlab: run the forward or the backward pass of any
 * registered stage and variant on caller-owned memory, with the features as arguments, and read
 * back the HBM bytes the stage counted. One header, no other flashlab header needed; every
 * function returns a status (FLASHLAB_OK = 0) and keeps a one-line message for the calling thread.
 *
 * Arrays (version 2), row-major and contiguous, in the golden files' layout:
 *   q (B, Hq, Tq, d)   k (B, Hkv, Tk, d)   v (B, Hkv, Tk, dv)   sinks (Hq)   dout (B, Hq, Tq, dv)
 *   o (B, Hq, Tq, dv)  lse (B, Hq, Tq)     dq, dk, dv like q, k, v          dsinks (Hq)
 *
 * Element type. q, k, v and dout are float32 or bf16 (flashlab_problem.dtype; bf16 as uint16_t bit
 * patterns, the upper half of a float32). sinks and every output (o, lse, dq, dk, dv, dsinks) are
 * float32 whatever dtype is; the backward_from entry reads o and lse as float32 too.
 *   - A bf16 stage (precision "bf16" in flashlab_list: 12, 14, 15 where built) gets bf16 inputs as
 *     they are, and rounds float32 inputs to bf16 itself (nearest even), as `flashlab run` does.
 *   - A float32 stage gets float32 inputs as they are, and bf16 inputs widened to float32 by the
 *     library (exact: every bf16 value is a float32), into scratch memory freed before returning.
 *
 * Memory (flashlab_problem.memory).
 *   - FLASHLAB_MEMORY_HOST: every array is host memory. A CPU stage runs on it; a CUDA stage gets
 *     the inputs copied to the GPU and its outputs copied back (what version 1 did). The outputs
 *     go to the library's own buffers first and are copied to the caller's only when the call
 *     returns FLASHLAB_OK: a failed call writes nothing.
 *   - FLASHLAB_MEMORY_CUDA: every array (inputs, sinks, outputs, the given o and lse) is CUDA
 *     device memory of the calling thread's current device, 16-byte aligned (as cudaMalloc's
 *     arrays are). A CUDA stage runs on it in place: nothing is copied to the host and back. The
 *     library checks each pointer (cudaPointerGetAttributes: device or managed memory, the current
 *     device, the alignment) and refuses any other with FLASHLAB_BAD_INPUT naming it; it cannot
 *     check the arrays' sizes. A CPU stage (device "cpu") refuses device memory with
 *     FLASHLAB_BAD_INPUT: it does not copy. The outputs are written in place: a call refused before
 *     running (any bad argument, a missing feature or head dim) leaves them untouched; once the
 *     run starts they are set to NaN first, so a CUDA error part way can leave them NaN or partly
 *     written, never holding stale values.
 *
 * Streams (flashlab_problem.stream, a cudaStream_t; NULL = the legacy default stream). The CUDA
 * stages launch their kernels on the legacy default stream, not on the given one. So that the
 * order is still right, a CUDA stage's call first waits for the given stream to finish
 * (cudaStreamSynchronize: work queued there before the call, which writes the inputs, is done),
 * and before it returns waits for its own work (cudaDeviceSynchronize): the outputs are complete,
 * for any stream, when the call returns. The call blocks the host meanwhile; it is not
 * stream-ordered (no work is queued on the stream). A CPU stage ignores the stream.
 *
 * The interface is versioned: FLASHLAB_API_VERSION changes when a function or a struct changes,
 * and flashlab_api_version() says which one the library was built with. A struct is passed with
 * its size first (struct_size = sizeof the caller's struct), so a newer library can tell an older
 * caller's struct apart: a flashlab_problem of version 1's size (it ends at sinks) is read as host
 * memory, float32, no stream. */
#ifndef FLASHLAB_PUBLIC_H
#define FLASHLAB_PUBLIC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FLASHLAB_API_VERSION 2

#if defined(__GNUC__)
#define FLASHLAB_EXPORT __attribute__((visibility("default")))
#else
#define FLASHLAB_EXPORT
#endif

/* Statuses: the exit codes of the command line (docs/design.md). */
enum {
    FLASHLAB_OK = 0,
    FLASHLAB_BAD_INPUT = 2,   /* a bad argument: the message names it */
    FLASHLAB_UNSUPPORTED = 3, /* the stage lacks a feature the call asks for: the message names the
                                 feature and the stage that adds it */
    FLASHLAB_NO_DEVICE = 77   /* device "cuda" without a usable GPU (or one the stage cannot run on) */
};

/* Where a call's arrays live (flashlab_problem.memory). */
enum {
    FLASHLAB_MEMORY_HOST = 0, /* host memory (version 1's only kind) */
    FLASHLAB_MEMORY_CUDA = 1  /* CUDA device memory of the calling thread's current device */
};

/* The element type of q, k, v and dout (flashlab_problem.dtype). */
enum {
    FLASHLAB_FLOAT32 = 0,
    FLASHLAB_BF16 = 1 /* bfloat16, as uint16_t bit patterns */
};

/* One attention problem. Set struct_size = sizeof(flashlab_problem); zero what you do not use. */
typedef struct {
    size_t struct_size;
    int B, Hq, Hkv, Tq, Tk, d, dv; /* Hq a multiple of Hkv (GQA); Tq <= Tk is not required */
    float scale;                   /* softmax scale; 0 = 1 / sqrt(d) */
    int causal;                    /* bottom-right aligned: query row i sees keys j <= i + Tk - Tq */
    int window;                    /* W > 0: also drop keys j <= i + Tk - Tq - W (implies causal) */
    int sink_tokens;               /* S > 0: the first S keys stay visible (still causal) */
    const void *q, *k, *v;         /* inputs, shapes above, elements of type dtype */
    const float *sinks;            /* learned sink logits (Hq), float32, or NULL */
    /* version 2 */
    int memory;                    /* FLASHLAB_MEMORY_HOST (0) or FLASHLAB_MEMORY_CUDA */
    int dtype;                     /* FLASHLAB_FLOAT32 (0) or FLASHLAB_BF16: q, k, v and dout */
    void *stream;                  /* cudaStream_t waited for before a CUDA stage runs; NULL = none */
} flashlab_problem;

/* What a call counted: HBM bytes read and written by each pass, and the extra memory (workspace)
 * each pass used. flashlab_backward fills both passes (its forward pass runs first);
 * flashlab_backward_from only the backward's (fwd_* are 0). */
typedef struct {
    size_t struct_size;
    uint64_t fwd_read, fwd_written, fwd_extra;
    uint64_t bwd_read, bwd_written, bwd_extra;
} flashlab_counters;

/* The FLASHLAB_API_VERSION the library was built with. */
FLASHLAB_EXPORT int flashlab_api_version(void);

/* The message of the calling thread's last failed call ("" after a success). */
FLASHLAB_EXPORT const char *flashlab_last_error(void);

/* Forward pass of `stage` ("07", "7" or "07_causal"), `variant` (NULL or "" = the default one) on
 * `device` ("cpu" or "cuda"): writes o and lse. counters may be NULL. */
FLASHLAB_EXPORT int flashlab_forward(const char *stage, const char *variant, const char *device,
                                     const flashlab_problem *p, float *o, float *lse,
                                     flashlab_counters *counters);

/* Forward then backward pass (the backward reads the forward's o and lse): writes o, lse, dq, dk,
 * dv, and dsinks when p->sinks is set (dsinks may be NULL otherwise). dout has p->dtype's element
 * type. counters may be NULL. */
FLASHLAB_EXPORT int flashlab_backward(const char *stage, const char *variant, const char *device,
                                      const flashlab_problem *p, const void *dout, float *o, float *lse,
                                      float *dq, float *dk, float *dv, float *dsinks,
                                      flashlab_counters *counters);

/* The backward pass alone, reading the o and lse a forward call returned (flashlab_forward of the
 * same stage, variant, device and problem: the library cannot check that they belong together):
 * writes dq, dk, dv, and dsinks when p->sinks is set. The forward pass does not run again; the
 * backward pass is flashlab_backward's, on the o and lse given (the same results where the stage
 * is deterministic, as the CPU stages are). o and lse are float32, in p->memory, and are only
 * read. counters may be NULL. */
FLASHLAB_EXPORT int flashlab_backward_from(const char *stage, const char *variant, const char *device,
                                           const flashlab_problem *p, const void *dout, const float *o,
                                           const float *lse, float *dq, float *dk, float *dv,
                                           float *dsinks, flashlab_counters *counters);

/* Every registered implementation, one line each, words separated by spaces:
 *   stage name device variant precision feature...
 * ("07 causal cpu - float32 backward causal": `flashlab list`'s columns, variant "-" for the
 * default, precision "float32" or "bf16", then the features beyond the forward pass, and the case
 * kind's name for a stage that runs another kind: "09 mla cpu - float32 mla"), written
 * into buf (NUL-terminated; nothing when len is too small); returns the length it needs. */
FLASHLAB_EXPORT size_t flashlab_list(char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
