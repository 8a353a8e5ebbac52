/* case.h — loading a case folder (DESIGN §4): case.json, q/k/v(/do/sinks).npy and, for golden
 * cases, the expected outputs. Validates every shape against the others.
 * case.json is optional: without it the case is non-causal, window 0, sink_tokens 0, scale
 * 1/sqrt(d), no description. With it, it must be a flat JSON object holding only those keys. */
#ifndef FLASHLAB_CASE_H
#define FLASHLAB_CASE_H

#include "attn.h"
#include "error.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { OUT_O, OUT_LSE, OUT_DQ, OUT_DK, OUT_DV, OUT_DSINKS, OUT_COUNT } OutputId;

typedef struct {
    int is_mla;            /* an MLA case (ckv.npy present): mla_* below, not the attention tensors */
    int is_paged;          /* a paged decode case (k_pages.npy present): k and v hold the page pools */
    char dir[4096];
    char name[256];        /* last path component */
    char description[512]; /* from case.json, may be empty */
    int has_scale;         /* case.json gave a scale */
    Tensor q, k, v, dout, sinks;    /* dout / sinks: data NULL when absent */
    Tensor block_table, seq_lens;   /* paged cases: int32 (tensor_int32) */
    Tensor expected[OUT_COUNT];     /* data NULL when absent or not asked for */
    AttnProblem problem;            /* sizes, options and pointers into the tensors above */
    Tensor mla_in[MLA_INPUT_COUNT]; /* MLA inputs, indexed by MlaInput */
    Tensor mla_y;                   /* expected y.npy (golden MLA cases) */
    MlaProblem mla;                 /* sizes, options and pointers into mla_in */
    int nonfinite_inputs;           /* input files holding NaN or Inf (each warned about on load) */
} Case;

/* Loads dir: an MLA case when it holds ckv.npy, a paged decode case when it holds k_pages.npy
 * (docs/conventions.md), else an attention case.
 * With want_expected, also loads the expected outputs that exist (o.npy and lse.npy are
 * then required; dq/dk/dv.npy required when do.npy exists, dsinks.npy when sinks.npy exists; y.npy for an MLA case).
 * Returns FL_OK or FL_BAD_INPUT (message names the file and what is wrong). On failure nothing is
 * left allocated. Refused besides malformed files: a scale above 1e30 or one that, times the
 * largest |q| and |k|, bounds the scores above 1e30; sequences of 2^30 positions or more; outputs
 * of more than INT_MAX elements. Each input file holding NaN or Inf gets one warning line on
 * stderr (fl_warn: the file, the count, the first index) and counts in nonfinite_inputs. */
int case_load(const char *dir, int want_expected, Case *c, FlError *err);
void case_free(Case *c);

/* Whether `flashlab run` may write its outputs into out_dir: not when out_dir or a folder above it
 * holds a file that some case reads as input (case.json, q.npy, ckv.npy, ...), i.e. when out_dir
 * is a case folder or lies inside one. A folder holding only the outputs of an earlier run is fine
 * (they are replaced). Nothing is created. FL_OK or FL_BAD_INPUT. */
int case_check_out_dir(const char *out_dir, FlError *err);

/* File name of an output ("o.npy", ...) and its shape for a problem (ndim returned). */
const char *output_file_name(OutputId id);
int output_shape(const AttnProblem *p, OutputId id, int64_t shape[TENSOR_MAX_DIMS]);
/* Whether a problem produces this output (grads only with dout, dsinks only with sinks). */
int output_present(const AttnProblem *p, OutputId id);

#ifdef __cplusplus
}
#endif
#endif
