/* kind.h — a kind of case, behind one interface.
 *
 * flashlab runs stages on cases of two kinds: attention (q, k, v; contiguous or a paged KV cache;
 * stages 01–08 and 10–13) and MLA (a latent cache and projection weights; stage 09). A kind knows
 * its folders (which file marks one, how it loads and validates), which stages take it, how to run
 * and time a stage on one of its cases, which outputs a run writes and how each is compared, the
 * FLOPs of a run, a one-line description, and how to make a seeded benchmark case. The commands
 * (check, run, tour, bench) are written once against this interface and never ask which kind
 * they hold; adding a kind means its own file and one entry in kind.c. */
#ifndef FLASHLAB_KIND_H
#define FLASHLAB_KIND_H

#include <stdint.h>
#include <stdio.h>

#include "attn.h"
#include "case.h"
#include "runner.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { KIND_MAX_OUTPUTS = 6 };
/* The direction a command asks for: DIR_FWD, DIR_BWD, or KIND_DIR_ANY (backward where the case has
 * dO and the stage a backward pass). */
enum { KIND_DIR_ANY = -1 };

/* What one run of a stage on a case wrote, in the kind's order of outputs. */
typedef struct {
    int count;
    const char *file[KIND_MAX_OUTPUTS]; /* "o.npy", "y.npy", ... */
    int gradient[KIND_MAX_OUTPUTS];     /* 1: compared at the gradient tolerance (check.h) */
    Tensor got[KIND_MAX_OUTPUTS];
    RunStats stats;                     /* counters and extra memory of each pass */
} KindRun;

void kind_run_free(KindRun *r);

/* An integer option a kind adds to `flashlab bench` for the sizes of its own problems (the MLA
 * kind: --latent M). Its value reaches the kind's bench_case by name (bench_size). */
typedef struct {
    const char *name; /* "--latent" */
    const char *meta; /* "M": the usage line shows "[--latent M]" */
    long min, max;
    const char *even; /* non-NULL: the value must be even, and this says why ("rotated pairs") */
} KindOption;

/* A paragraph a kind adds to one command's --help. */
typedef struct {
    const char *command; /* "check" */
    const char *text;    /* whole lines, each ending in '\n' */
} KindHelp;

enum { BENCH_MAX_KIND_SIZES = 8 };

/* The sizes a benchmark case is made from (flashlab bench's options). */
typedef struct {
    int B, H, Hkv, Tq;               /* Hkv, Tq: 0 = H, T */
    int causal, window, sink_tokens, sinks, page_size;
    int nkind_sizes;                 /* the kinds' own options given (KindOption), by name */
    struct {
        const char *name;
        int value;
    } kind_sizes[BENCH_MAX_KIND_SIZES];
} BenchShape;

/* The value of a kind's own bench option `name` ("--latent"), or fallback when it was not given. */
int bench_size(const BenchShape *s, const char *name, int fallback);

typedef struct CaseKind {
    const char *name;   /* "attention", "mla" */
    const char *marker; /* the file that makes a folder this kind ("ckv.npy"); NULL: the default kind */
    const char *tour_case; /* the golden case tour runs this kind's stages on */
    const char *const *input_files; /* NULL-terminated: every file its folders hold as input */

    /* Loading: c->dir and c->name are set; fill the rest (expected outputs only with
     * want_expected). FL_OK or FL_BAD_INPUT with one line naming the file. */
    int (*load)(Case *c, int want_expected, FlError *err);
    /* Frees what load or bench_case allocated (case_free calls it). */
    void (*release)(Case *c);

    /* Whether impl takes cases of this kind at all. */
    int (*takes)(const StageImpl *impl);
    /* The direction a run of impl on c goes for what the command asks (want: DIR_FWD, DIR_BWD or
     * KIND_DIR_ANY): DIR_BWD only when want is not DIR_FWD, c has dO and impl a backward pass. */
    Direction (*direction)(const StageImpl *impl, const Case *c, int want);
    /* Whether c asks for gradients (an attention case with do.npy). */
    int (*asks_backward)(const Case *c);
    /* FL_OK when impl runs c in dir, else FL_UNSUPPORTED with why (the feature and the stage that
     * adds it, or the head dims impl runs) and the same in a few words in short_why. */
    int (*supports)(const StageImpl *impl, Direction dir, const Case *c, char *short_why, size_t len,
                    FlError *why);
    /* Runs impl on c (counting on) into r; r's outputs are allocated (poisoned) here. */
    int (*run)(const StageImpl *impl, Direction dir, const Case *c, const RunCtx *ctx, KindRun *r,
               FlError *err);
    /* Median ms of timed runs (runner.h Timing), counting off. */
    int (*time)(const StageImpl *impl, Direction dir, const Case *c, const RunCtx *ctx, const Timing *timing,
                double *ms, FlError *err);
    /* The expected tensor of output file `file`, or NULL when c has none. */
    const Tensor *(*expected)(const Case *c, const char *file);

    /* What a run in dir is called in check's header, tour's and bench's columns: "fwd", "fwd+bwd", "mla". */
    const char *(*label)(Direction dir);
    double (*flops)(const Case *c, Direction dir);
    /* "B=2 Hq=4 Hkv=2 Tq=37 Tk=37 d=24 dv=24 causal" */
    void (*describe)(const Case *c, char *buf, size_t len);
    /* The sizes as JSON members, for bench --json: "\"B\": 2, ..., " */
    void (*describe_json)(const Case *c, FILE *f);
    /* bench's size columns: B, Hq, Hkv, Tq, Tk, d, aligned. */
    void (*columns)(const Case *c, char *buf, size_t len);
    /* A seeded case of sequence length T and head dim d in memory (no folder), for bench. */
    int (*bench_case)(const BenchShape *s, const StageImpl *impl, int T, int d, Direction dir, Case *c,
                      FlError *err);

    /* The bench options of its own sizes (ended by a NULL name), or NULL; and the paragraphs it
     * adds to the commands' --help (ended by a NULL command), or NULL. */
    const KindOption *bench_options;
    const KindHelp *help;
} CaseKind;

extern const CaseKind kind_attention; /* the default kind; the others declare themselves (kind_mla.h) */

/* The seed of bench_case's inputs for sequence length T and head dim d (the same for every kind). */
uint64_t bench_seed(int T, int d);

/* Every kind, NULL-terminated; the default kind (no marker) last. */
const CaseKind *const *case_kinds(void);

/* The first stage whose implementations take cases of kind ("09" for MLA). */
const char *kind_first_stage(const CaseKind *kind);
/* The kind option called name (any kind's), or NULL. */
const KindOption *kind_option(const char *name);
/* Prints every kind's paragraph for command (the text of --help). */
void kind_print_help(FILE *f, const char *command);
/* Prints, for each kind with its own bench options, one usage line: indent, "[--latent M] ...",
 * and which stages take the kind. */
void kind_print_bench_usage(FILE *f, const char *indent);
/* The kind whose stages include impl. */
const CaseKind *kind_of_stage(const StageImpl *impl);

#ifdef __cplusplus
}
#endif
#endif
