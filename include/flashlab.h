/* flashlab.h — the public C interface of libflashlab: run the forward or the backward pass of any
 * registered stage and variant on caller-owned memory, with the features as arguments, and read
 * back the HBM bytes the stage counted. One header, no other flashlab header needed; every
 * function returns a status (FLASHLAB_OK = 0) and keeps a one-line message for the calling thread.
 *
 * Memory (version 1): host memory, float32, in the golden files' layout
 *   q (B, Hq, Tq, d)   k (B, Hkv, Tk, d)   v (B, Hkv, Tk, dv)   sinks (Hq)   dout (B, Hq, Tq, dv)
 *   o (B, Hq, Tq, dv)  lse (B, Hq, Tq)     dq, dk, dv like q, k, v          dsinks (Hq)
 * A CUDA stage (device "cuda") gets the problem copied to the GPU and its outputs copied back, as
 * `flashlab run` does; a bf16 stage (12, 14) rounds q, k, v and dout to bf16 itself. The outputs
 * are written only when the call returns FLASHLAB_OK.
 *
 * The interface is versioned: FLASHLAB_API_VERSION changes when a function or a struct changes,
 * and flashlab_api_version() says which one the library was built with. A struct is passed with
 * its size first (struct_size = sizeof the caller's struct), so a newer library can tell an older
 * caller's struct apart. */
#ifndef FLASHLAB_PUBLIC_H
#define FLASHLAB_PUBLIC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FLASHLAB_API_VERSION 1

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

/* One attention problem. Set struct_size = sizeof(flashlab_problem); zero what you do not use. */
typedef struct {
    size_t struct_size;
    int B, Hq, Hkv, Tq, Tk, d, dv; /* Hq a multiple of Hkv (GQA); Tq <= Tk is not required */
    float scale;                   /* softmax scale; 0 = 1 / sqrt(d) */
    int causal;                    /* bottom-right aligned: query row i sees keys j <= i + Tk - Tq */
    int window;                    /* W > 0: also drop keys j <= i + Tk - Tq - W (implies causal) */
    int sink_tokens;               /* S > 0: the first S keys stay visible (still causal) */
    const float *q, *k, *v;        /* inputs, shapes above */
    const float *sinks;            /* learned sink logits (Hq), or NULL */
} flashlab_problem;

/* What a call counted: HBM bytes read and written by each pass, and the extra memory (workspace)
 * each pass used. The backward call fills both passes (its forward pass runs first). */
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
 * dv, and dsinks when p->sinks is set (dsinks may be NULL otherwise). counters may be NULL. */
FLASHLAB_EXPORT int flashlab_backward(const char *stage, const char *variant, const char *device,
                                      const flashlab_problem *p, const float *dout, float *o, float *lse,
                                      float *dq, float *dk, float *dv, float *dsinks,
                                      flashlab_counters *counters);

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
