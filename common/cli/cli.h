/* cli.h — what the flashlab command's files share: the parsed options, the helpers every command
 * uses, and one entry function per command (cmd_*.c). main.c dispatches; options.c parses;
 * the commands run stages through the case kinds (kind.h) and never ask which kind a case is.
 *
 * Exit codes (README.md, "The flashlab tool"): 0 ok; 1 a check failed; 2 bad usage or bad input;
 * 3 the stage lacks a feature the case asks for; 77 no CUDA device. Errors are one line on stderr. */
#ifndef FLASHLAB_CLI_H
#define FLASHLAB_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "attn.h"
#include "case.h"
#include "check.h"
#include "error.h"
#include "kind.h"
#include "runner.h"

#define MAX_POSITIONAL 256
#define MAX_LIST 32

typedef struct {
    int values[MAX_LIST];
    int count;
} IntList;

typedef struct {
    const char *command;
    Device device;
    int device_all;   /* tour --device all (the default of tour) */
    const char *variant;
    int direction;    /* DIR_FWD, DIR_BWD or KIND_DIR_ANY */
    RunCtx ctx;       /* sram_bytes, block_r, block_c, threads, splits, ranks */
    int verbose;
    int no_io_check;  /* check --no-io-check: a student copy passes on its outputs alone */
    int docs;         /* diff --docs: the READMEs too */
    const char *out_dir;
    /* bench */
    const char *stages;
    IntList T, d;
    BenchShape shape; /* B, H, Hkv, Tq, masks, page size, and the kinds' own sizes (kind.h) */
    int reps, json;
    int queued;       /* bench --queued: each timed CUDA run launched behind a hold (runner.h Timing) */
    const char *positional[MAX_POSITIONAL];
    int npositional;
} Options;

/* options.c: parses argv (after the subcommand) into o. FL_OK, FL_BAD_INPUT (message printed),
 * or -1 when --help was asked for. */
int parse_options(Options *o, int argc, char **argv);

/* ---- util.c ---- */

/* "flashlab CMD: <fmt with what> (see 'flashlab CMD --help')" on stderr; returns FL_BAD_INPUT. */
int usage_error(const char *command, const char *fmt, const char *what);
/* The golden case folder: $FLASHLAB_GOLDEN, else the source tree's golden/cases. */
const char *golden_dir(void);
/* "12.3 MB": decimal units, as memory bandwidth is quoted. */
const char *human_bytes(double bytes, char *buf, size_t len);
/* "cpu", "cuda naive", ... */
const char *impl_label(const StageImpl *impl, char *buf, size_t len);
int has_backward(const StageImpl *impl);
/* Why impl has no backward pass ("stage 06 adds it" / "it is a forward-only stage"). */
const char *no_backward_reason(const StageImpl *impl);
/* "float32", or "bf16 d=64,128". */
const char *precision_label(const StageImpl *impl, char *buf, size_t len);
/* "forward,backward,causal,...", and the kind's name for a stage of a kind other than attention
 * ("forward,mla"). */
const char *feature_list(const StageImpl *impl, char *buf, size_t len);
/* The implementation named by stage and o's device and variant, or why not (2) or no device (77). */
int resolve_impl(const Options *o, const char *stage, const StageImpl **impl);
RunCtx run_ctx(const Options *o);
/* Exit code of several results: bad input beats unsupported beats no device beats failure. */
int worse(int a, int b);
/* The folders in dir, sorted; free with free_names. */
int list_subdirs(const char *dir, char ***names, int *count, FlError *err);
void free_names(char **names, int count);
/* text on stdout in lines of at most width columns, each indented by indent spaces. */
void print_wrapped(int indent, int width, const char *text);
#define CLI_WIDTH 120 /* list and tour fit a terminal this wide */
/* When stderr is a terminal: "[3 of 12 done, 41 s] what" on one rewritten line (done == total
 * clears it). Nothing otherwise, so logs and pipes stay clean. */
void progress_line(int done, int total, double start_ms, const char *what);
/* s as a JSON string literal on stdout. */
void json_string(const char *s);

/* ---- compare.c ---- */

/* One compared tensor, for check --json. */
typedef struct {
    const char *name;
    CheckResult r;
} TensorGrade;

/* Compares every output of r with c's expected files at the tolerance of `precision` (gradients
 * at the gradient tolerance). *max_err gets the largest absolute error; grades (may be NULL) one
 * entry per compared tensor (*ngrades). print: 0 nothing; 1 a summary line first when something is
 * wrong, then one line per tensor with its first 2 mismatches; 2 (--verbose) up to CHECK_MAX_SHOWN
 * mismatches per tensor. Returns the failing tensors. */
int compare_run(const Case *c, const KindRun *r, Precision precision, int print, double *max_err,
                TensorGrade *grades, int *ngrades);
/* The non-finite rule: from finite inputs, one warning line per output holding NaN or an infinity
 * (other than lse's -inf of a row that sees no key). */
void warn_odd_outputs(const Case *c, const KindRun *r);

/* ---- the commands ---- */
int cmd_list(Options *o);
int cmd_check(Options *o);
int cmd_run(Options *o);
int cmd_tour(Options *o);
int cmd_bench(Options *o);
int cmd_diff(Options *o);
int cmd_exercise(Options *o);

#endif
