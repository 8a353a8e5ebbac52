/* attn.h — the attention problem every stage solves, and how a stage describes itself.
 *
 * Shapes (docs/conventions.md), float32, row-major, contiguous:
 *   q    (B, Hq,  Tq, d)      k  (B, Hkv, Tk, d)      v  (B, Hkv, Tk, dv)
 *   o    (B, Hq,  Tq, dv)     lse (B, Hq, Tq)          dout = dO (B, Hq, Tq, dv)
 *   sinks (Hq)  learned sink logits, or NULL
 * Query head h reads kv head h / (Hq / Hkv). Causal masks are bottom-right aligned: query row i
 * sits at position i' = i + Tk - Tq and sees keys j <= i'.
 *
 * For a CPU implementation every pointer is host memory; for a CUDA implementation every pointer
 * in AttnProblem and AttnTensors is device memory (common/cuda_runner.cu does the copies). */
#ifndef FLASHLAB_ATTN_H
#define FLASHLAB_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "hbm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int B, Hq, Hkv, Tq, Tk, d, dv;
    float scale;     /* softmax scale; the case loader fills 1/sqrt(d) when case.json has none */
    int causal;      /* 0/1; window > 0 implies causal */
    int window;      /* W > 0: keep keys i' - W < j <= i'; 0 = off */
    int sink_tokens; /* S > 0: also keep keys j < S (still j <= i') */
    const float *q, *k, *v;
    const float *sinks; /* (Hq) or NULL */
    const float *dout;  /* dO (B, Hq, Tq, dv), or NULL when only the forward pass is asked for */
    /* A paged KV cache (stage 11; docs/conventions.md "Paged decode cases") when page_size > 0:
     * k and v are then the page pools k_pages (P, page_size, Hkv, d) and v_pages (P, page_size,
     * Hkv, dv). Sequence b holds seq_lens[b] keys; key j lives in page block_table[b, j / page_size],
     * slot j % page_size; its Tq queries sit at its last Tq positions. Tk is the longest sequence.
     * page_size == 0: k and v are contiguous (B, Hkv, Tk, d|dv) and every sequence has Tk keys. */
    int page_size, num_pages, max_pages; /* page size, P, and entries per row of block_table */
    const int32_t *block_table;          /* (B, max_pages); entries past a sequence's pages: -1 */
    const int32_t *seq_lens;             /* (B) */
    /* bf16 copies of q, k, v and dout (bit patterns, rounded to nearest even; common/bf16.h), same
     * shapes and memory (host or device) as the float32 ones: set by the runner for a stage whose
     * precision is PRECISION_BF16 (stage 12), else NULL. dout_bf16 only when dout is given.
     * A caller of the runner with bf16 inputs (libflashlab) may give these instead of the float32
     * ones (q, k, v, dout NULL): the runner widens them for a float32 stage (runner.h). */
    const uint16_t *q_bf16, *k_bf16, *v_bf16, *dout_bf16;
} AttnProblem;

/* Whether p asks for the backward pass: dO given, as float32 or as bf16. */
static inline int attn_has_dout(const AttnProblem *p) { return p->dout != NULL || p->dout_bf16 != NULL; }

/* Outputs. The forward pass writes o and lse; the backward pass reads o and lse (written by the
 * forward pass of the same implementation) and writes dq, dk, dv and, when sinks are given, dsinks. */
typedef struct {
    float *o, *lse;
    float *dq, *dk, *dv, *dsinks;
} AttnTensors;

/* Features a case may ask for and a stage may support (bit flags). */
enum {
    FEAT_BACKWARD = 1u << 0,    /* do.npy present: gradients          (stage 06 adds it) */
    FEAT_CAUSAL = 1u << 1,      /* causal mask                         (stage 07) */
    FEAT_GQA = 1u << 2,         /* Hq != Hkv                           (stage 08) */
    FEAT_WINDOW = 1u << 3,      /* sliding window                      (stage 10) */
    FEAT_SINK_TOKENS = 1u << 4, /* sink tokens                         (stage 10) */
    FEAT_SINKS = 1u << 5,       /* learned sink logits                 (stage 10) */
    FEAT_PAGED = 1u << 6        /* a paged KV cache (page_size > 0)    (stage 11) */
};
#define FEAT_COUNT 7

/* Features a problem needs (backward counts only when dout is non-NULL). */
unsigned attn_required_features(const AttnProblem *p);
/* p with a window or a sink-token count larger than Tk lowered to Tk, which keeps exactly the same
 * keys (a window of Tk already reaches back past key 0; Tk sink tokens are all the keys), so that
 * no stage adds a tile width to a number near INT_MAX. The runner hands every stage this form. */
AttnProblem attn_problem_bounded(const AttnProblem *p);
/* Elements of k and of v: the page pools of a paged problem, else B * Hkv * Tk * (d or dv). */
size_t attn_k_numel(const AttnProblem *p);
size_t attn_v_numel(const AttnProblem *p);
/* "causal", "gqa", ... for one flag. */
const char *attn_feature_name(unsigned feature);
/* The stage of the ladder that adds a feature ("06", "07", ...), docs/design.md#features. */
const char *attn_feature_added_by(unsigned feature);

typedef enum { DIR_FWD = 0, DIR_BWD = 1 } Direction;
/* The precision a stage computes in: float32 for 01–11; stage 12 reads bf16 inputs and
 * accumulates in float32. The checker's tolerance follows it (check.h, docs/conventions.md). */
typedef enum { PRECISION_F32 = 0, PRECISION_BF16 = 1 } Precision;
typedef enum { DEVICE_CPU = 0, DEVICE_CUDA = 1 } Device;

/* Stage 13 (ring attention): what one rank counted, its HBM traffic and the bytes it sent to and
 * received from its neighbours in the ring. */
typedef struct {
    HbmCounter hbm;
    uint64_t link_sent, link_received;
    double compute_ms; /* GPU ranks: how long the rank's compute stream ran kernels (CUDA events
                          around the prologue and each step), summed; 0 on the CPU */
} RankCounter;

/* Everything about one run that is not the problem itself. */
typedef struct {
    HbmCounter *hbm;     /* counts go here; NULL = counting off (timing). CPU stages count into it
                            directly; for CUDA stages the runner fills it from hbm_dev. */
    unsigned long long *hbm_dev; /* CUDA only: device array [0] = bytes read, [1] = bytes written,
                                    or NULL when counting is off. Set by the runner. */
    size_t sram_bytes;   /* M: SRAM size in bytes for CPU stages 03+ (--sram) */
    int block_r, block_c;/* tile sizes Br, Bc; 0 = derive from M and d (CPU) or the kernel's own */
    int threads;         /* CPU worker threads, >= 1 */
    int splits;          /* stages 11, 16: key splits per (sequence, kv head); 0 = the stage's heuristic */
    int blocks;          /* stages 14, 18 forward: thread blocks of its grid, each taking query tiles
                            until none are left; 0 = the variant's choice (one per SM, or a
                            block per tile for "per-tile") */
    int ranks;           /* stage 13: ranks P of the ring (0 = 1) */
    RankCounter *rank_counters; /* stage 13: `ranks` entries it adds its counts to (the caller
                                   zeroes them; a forward + backward run adds both passes), or NULL */
    void *comm;          /* stage 13 on GPUs, one process per GPU (launch mode B): this process is
                            rank `rank` of `ranks` in this NCCL communicator (an ncclComm_t), on the
                            current CUDA device, and every pointer of the problem and the outputs
                            is that rank's share (stages/13_ring/split.h); it counts into
                            rank_counters[rank]. NULL: one process drives all the ranks, each on
                            its own GPU, the problem whole on the current device (launch mode A) */
    int rank;            /* with comm: this process's rank */
    void *workspace;     /* scratch of StageImpl.workspace_bytes(...) bytes, allocated by the runner
                            (host memory for CPU, device memory for CUDA); NULL when 0 bytes */
} RunCtx;

typedef int (*AttnFn)(const AttnProblem *p, AttnTensors *t, RunCtx *ctx, FlError *err);
typedef size_t (*WorkspaceFn)(const AttnProblem *p, const RunCtx *ctx, Direction dir);

/* What every kind's entry (StageImpl.kind_entry) begins with: the name of the kind it belongs to
 * (CaseKind.name). */
typedef struct {
    const char *kind;
} KindEntry;

/* One implementation of one stage on one device (a stage may have several variants). */
typedef struct {
    const char *stage;   /* "03" */
    const char *name;    /* "tiled": the folder is stages/03_tiled */
    const char *variant; /* "" for the default, else e.g. "naive" */
    Device device;
    const char *lesson;  /* one line: the idea the stage adds */
    unsigned features;   /* FEAT_* it supports */
    AttnFn forward;
    AttnFn backward;     /* NULL unless features has FEAT_BACKWARD */
    WorkspaceFn workspace_bytes; /* NULL = no scratch. This is the "extra memory" the tools report:
                                    bytes beyond inputs and outputs that live in (simulated) HBM. */
    /* A stage of another case kind (forward and backward NULL): the entry points that kind calls,
       of a type the kind defines (stage 09: an MlaEntry, common/kind_mla_stage.h) whose first
       member is the kind's name (KindEntry below), which is how the kind recognises its stages;
       NULL for attention stages. */
    const void *kind_entry;
    Precision precision; /* what it computes in; PRECISION_F32 (0) for stages 01–11 */
    int head_dims[2];    /* the head dims it runs, each with d = dv; {0, 0} = any */
    int own_streams;     /* CUDA: runs its kernels on streams of its own (stage 13's ring), which a
                            kernel holding the default stream does not hold: no `bench --queued` */
} StageImpl;

/* Each stage source file defines one NULL-terminated array, named after its folder and device:
 *   stages/03_tiled/tiled.c           ->  const StageImpl *const stage03_tiled_cpu[]  = {&..., NULL};
 *   stages/05_fa2/fa2.cu              ->  extern "C" const StageImpl *const stage05_fa2_cuda[] = {...};
 * CMake generates the registry from the files it finds (common/registry.c.in). */

/* The registry: all implementations, in ladder order, NULL-terminated. */
const StageImpl *const *stage_registry(void);
/* The implementation of stage (e.g. "3", "03", "03_tiled") on device with variant ("" or NULL = default). */
const StageImpl *stage_find(const char *stage, Device device, const char *variant);
/* The head dims impl runs, joined by sep ("64, 128" with ", "), into buf; "" when it runs any. */
const char *stage_head_dims_text(const StageImpl *impl, const char *sep, char *buf, size_t len);

const char *device_name(Device device); /* "cpu" / "cuda" */

#ifdef __cplusplus
}
#endif
#endif
