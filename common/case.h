/* case.h — loading a case folder (docs/design.md#case-folders): case.json, q/k/v(/do/sinks).npy and, for golden
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

struct CaseKind; /* kind.h */
struct cJSON;    /* cjson/cJSON.h */

typedef struct Case {
    const struct CaseKind *kind; /* what the folder is (kind.h); set by case_load */
    char dir[4096];
    char name[256];        /* last path component */
    char description[512]; /* from case.json, may be empty */
    int nonfinite_inputs;  /* input files holding NaN or Inf (each warned about on load) */
    void *kind_data;       /* what a kind other than attention keeps (kind_mla.c) */
    /* The attention kind (contiguous or paged), which the stages, the tests and the ring launcher
     * read directly: */
    int is_paged;          /* a paged decode case (k_pages.npy present): k and v hold the page pools */
    int has_scale;         /* case.json gave a scale */
    Tensor q, k, v, dout, sinks;    /* dout / sinks: data NULL when absent */
    Tensor block_table, seq_lens;   /* paged cases: int32 (tensor_int32) */
    Tensor expected[OUT_COUNT];     /* data NULL when absent or not asked for */
    AttnProblem problem;            /* sizes, options and pointers into the tensors above */
} Case;

/* Loads dir as the kind whose marker file it holds (kind.h: ckv.npy makes an MLA case), else as an
 * attention case (a paged decode case when it holds k_pages.npy; docs/conventions.md).
 * With want_expected, also loads the expected outputs (for attention: o.npy and lse.npy; dq/dk/dv.npy
 * when do.npy exists, dsinks.npy when sinks.npy exists).
 * Returns FL_OK or FL_BAD_INPUT (message names the file and what is wrong). On failure nothing is
 * left allocated. Refused besides malformed files: a scale above 1e30 or one that, times the
 * largest |q| and |k|, bounds the scores above 1e30; sequences of 2^30 positions or more; outputs
 * of more than INT_MAX elements. Each input file holding NaN or Inf gets one warning line on
 * stderr (fl_warn: the file, the count, the first index) and counts in nonfinite_inputs. */
int case_load(const char *dir, int want_expected, Case *c, FlError *err);
void case_free(Case *c);

/* ---- for the kinds' loaders ---- */

/* The attention kind's loader and release (case_attention.c; kind_attention.c registers them). */
int case_load_attention(Case *c, int want_expected, FlError *err);
void case_free_attention(Case *c);

/* Reads c->dir/case.json when it exists and hands every key to apply (a duplicate key, invalid
 * JSON or a non-object is refused here). */
typedef int (*CaseOptionFn)(Case *c, const char *path, const struct cJSON *item, FlError *err);
int case_read_options(Case *c, CaseOptionFn apply, FlError *err);
/* The option kinds keys share: a bool, a finite float > 0, the description; and the refusal of a
 * key a kind does not know (kind_words: " for an MLA case" or ""; allowed: "causal, description"). */
int case_option_bool(const char *path, const struct cJSON *item, int *out, FlError *err);
int case_option_positive(const char *path, const struct cJSON *item, float *out, FlError *err);
int case_option_int(const char *path, const struct cJSON *item, int min, const char *rule, int *out,
                    FlError *err);
int case_option_description(Case *c, const char *path, const struct cJSON *item, FlError *err);
int case_option_unknown(const char *path, const char *key, const char *kind_words, const char *allowed,
                        FlError *err);

/* c->dir/file into out. */
void case_path(const Case *c, const char *file, char *out, size_t len);
/* c->dir/file into t (float32); an absent file is fine unless required. */
int case_load_tensor(const Case *c, const char *file, int required, Tensor *t, FlError *err);
/* t (file) has exactly ndim dimensions (names: "(B, Tq, D)"), each in [1, INT_MAX]. */
int case_check_ndim(const Case *c, const char *file, const Tensor *t, int ndim, const char *names,
                    FlError *err);
/* a's dimension da equals b's dimension db (what names the size, "B"); else one line naming both. */
int case_check_same(const Case *c, const char *fa, const Tensor *a, int da, const char *fb, const Tensor *b,
                    int db, const char *what, FlError *err);
/* t (file) has exactly this shape. */
int case_check_shape(const Case *c, const char *file, const Tensor *t, const int64_t *shape, int ndim,
                     FlError *err);
/* One warning line when t (file) holds NaN or Inf; returns 1 then, else 0. */
int case_warn_nonfinite(const Case *c, const char *file, const Tensor *t);

/* ---- limits that keep the stages' float32 arithmetic finite (docs/conventions.md, "Limits") ---- */

enum { MAX_POSITIONS = 1 << 30 }; /* Tq, Tk, seq_lens: a tile width added to a position stays an int */
#define MAX_FLOAT_SUM 1e30 /* a bound on any product or sum the stages form in float32: ~2^100, far
                              below float32's largest value, 3.4e38 */
/* The largest Euclidean norm of a row of width `width` in t (float64); 0 for an absent t. A row
 * holding a NaN is skipped (the non-finite rule covers it); one holding an infinity makes it
 * infinite, so no bound accepts it. */
double case_max_row_norm(const Tensor *t, int64_t width);
/* One refusal, FL_BAD_INPUT: "DIR/FILES: WHAT is X, above LIMIT: WHY". */
int case_too_large(const Case *c, const char *files, const char *what, double value, double limit, const char *why,
                   FlError *err);

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
