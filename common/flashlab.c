/* flashlab.c — the command-line tool: list, check, run, tour, bench, diff, exercise (DESIGN §5).
 *
 * Every subcommand turns harness statuses into exit codes: 0 ok, 1 a check failed, 2 bad usage or
 * bad input, 3 the stage lacks a feature the case asks for, 77 no CUDA device. Errors are one line
 * on stderr. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "attn.h"
#include "case.h"
#include "check.h"
#include "error.h"
#include "exercise.h"
#include "hbm.h"
#include "npy.h"
#include "random.h"
#include "runner.h"
#include "stage_files.h"
#include "tensor.h"

#define MAX_POSITIONAL 256
#define MAX_LIST 32
#define TOUR_REPS 5
#define TOUR_MLA_CASE "mla_prefill_t24" /* stage 09 rows: MLA cases have their own inputs */
#define BENCH_SEED 20240611u

/* ==== options ================================================================================ */

enum { DIRECTION_BOTH = -1 };

typedef struct {
    int values[MAX_LIST];
    int count;
} IntList;

typedef struct {
    const char *command;
    Device device;
    int device_all;   /* tour --device all (the default of tour) */
    const char *variant;
    int direction;    /* DIR_FWD, DIR_BWD or DIRECTION_BOTH */
    RunCtx ctx;       /* sram_bytes, block_r, block_c, threads, splits */
    int verbose;
    const char *out_dir;
    /* bench */
    const char *stages;
    IntList T, d;
    int B, H, Hkv, Tq, reps, causal, json; /* Hkv, Tq: 0 = H, T (self-attention) */
    int window, sink_tokens, sinks;          /* stage 10's mask and learned sinks */
    int latent, rope_dim, model_dim, q_rank; /* stage 09's m, p, D, mq (0 = DeepSeek-V2's) */
    int page_size;                           /* stage 11: a paged KV cache of this page size (0 = none) */
    const char *positional[MAX_POSITIONAL];
    int npositional;
} Options;

typedef struct {
    const char *name;
    int takes_value;
    const char *commands; /* space-separated list of the subcommands that accept it */
} OptionSpec;

static const OptionSpec option_specs[] = {
    {"--device", 1, "check run tour bench"},
    {"--variant", 1, "check run bench"},
    {"--direction", 1, "check run bench"},
    {"--sram", 1, "check run tour bench"},
    {"--block-r", 1, "check run bench"},
    {"--block-c", 1, "check run bench"},
    {"--threads", 1, "check run tour bench"},
    {"--splits", 1, "check run bench"},
    {"--ranks", 1, "check run bench"},
    {"--page-size", 1, "bench"},
    {"--verbose", 0, "check"},
    {"--out", 1, "run"},
    {"--stages", 1, "bench"},
    {"--T", 1, "bench"},
    {"--B", 1, "bench"},
    {"--H", 1, "bench"},
    {"--Hkv", 1, "bench"},
    {"--Tq", 1, "bench"},
    {"--d", 1, "bench"},
    {"--causal", 0, "bench"},
    {"--window", 1, "bench"},
    {"--sink-tokens", 1, "bench"},
    {"--sinks", 0, "bench"},
    {"--reps", 1, "bench"},
    {"--json", 0, "check bench"},
    {"--latent", 1, "bench"},
    {"--rope-dim", 1, "bench"},
    {"--model-dim", 1, "bench"},
    {"--q-rank", 1, "bench"},
};

static int usage_error(const char *command, const char *fmt, const char *what)
{
    fprintf(stderr, "flashlab%s%s: ", command ? " " : "", command ? command : "");
    fprintf(stderr, fmt, what);
    fprintf(stderr, " (see 'flashlab %s%s--help')\n", command ? command : "", command ? " " : "");
    return FL_BAD_INPUT;
}

static int word_in_list(const char *word, const char *list)
{
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
            return 1;
    return 0;
}

/* Whole-string integer in [min, max]. */
static int parse_int(const char *command, const char *name, const char *text, long min, long max,
                     int *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end != '\0' || v < min || v > max) {
        fprintf(stderr, "flashlab %s: %s needs an integer in [%ld, %ld], got '%s' (see 'flashlab %s --help')\n",
                command, name, min, max, text, command);
        return FL_BAD_INPUT;
    }
    *out = (int)v;
    return FL_OK;
}

/* Bytes with an optional K or M suffix (1024-based): 65536, 64K, 1M. */
static int parse_bytes(const char *command, const char *name, const char *text, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    unsigned long long unit = 1;
    if (*end == 'K' || *end == 'k')
        unit = 1024, end++;
    else if (*end == 'M' || *end == 'm')
        unit = 1024 * 1024, end++;
    if (errno || end == text || *end != '\0' || text[0] == '-' || v == 0 || v > (1ull << 40) / unit) {
        fprintf(stderr, "flashlab %s: %s needs a positive byte count like 65536 or 64K, got '%s' "
                "(see 'flashlab %s --help')\n", command, name, text, command);
        return FL_BAD_INPUT;
    }
    *out = (size_t)(v * unit);
    return FL_OK;
}

/* "512,1024,2048" into list; each value in [1, max]. */
static int parse_int_list(const char *command, const char *name, const char *text, long max, IntList *list)
{
    char buf[512];
    if (strlen(text) >= sizeof buf || text[0] == '\0')
        return usage_error(command, "bad list '%s'", text);
    strcpy(buf, text);
    list->count = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (list->count == MAX_LIST)
            return usage_error(command, "too many values in '%s'", text);
        int rc = parse_int(command, name, tok, 1, max, &list->values[list->count++]);
        if (rc != FL_OK)
            return rc;
    }
    if (list->count == 0)
        return usage_error(command, "empty list '%s'", text);
    return FL_OK;
}

static int apply_option(Options *o, const char *name, const char *value)
{
    const char *cmd = o->command;
    if (!strcmp(name, "--device")) {
        if (!strcmp(value, "cpu"))
            o->device = DEVICE_CPU, o->device_all = 0;
        else if (!strcmp(value, "cuda"))
            o->device = DEVICE_CUDA, o->device_all = 0;
        else if (!strcmp(value, "all") && !strcmp(cmd, "tour"))
            o->device_all = 1;
        else
            return usage_error(cmd, "unknown device '%s'", value);
        return FL_OK;
    }
    if (!strcmp(name, "--variant")) {
        o->variant = value;
        return FL_OK;
    }
    if (!strcmp(name, "--direction")) {
        if (!strcmp(value, "fwd"))
            o->direction = DIR_FWD;
        else if (!strcmp(value, "bwd"))
            o->direction = DIR_BWD;
        else
            return usage_error(cmd, "--direction is fwd or bwd, got '%s'", value);
        return FL_OK;
    }
    if (!strcmp(name, "--sram"))
        return parse_bytes(cmd, name, value, &o->ctx.sram_bytes);
    if (!strcmp(name, "--block-r"))
        return parse_int(cmd, name, value, 1, 1 << 20, &o->ctx.block_r);
    if (!strcmp(name, "--block-c"))
        return parse_int(cmd, name, value, 1, 1 << 20, &o->ctx.block_c);
    if (!strcmp(name, "--threads"))
        return parse_int(cmd, name, value, 1, 4096, &o->ctx.threads);
    if (!strcmp(name, "--ranks"))
        return parse_int(cmd, name, value, 1, 64, &o->ctx.ranks);
    if (!strcmp(name, "--splits"))
        return parse_int(cmd, name, value, 1, 1024, &o->ctx.splits);
    if (!strcmp(name, "--page-size"))
        return parse_int(cmd, name, value, 1, 1 << 20, &o->page_size);
    if (!strcmp(name, "--verbose"))
        return o->verbose = 1, FL_OK;
    if (!strcmp(name, "--out"))
        return o->out_dir = value, FL_OK;
    if (!strcmp(name, "--stages"))
        return o->stages = value, FL_OK;
    if (!strcmp(name, "--T"))
        return parse_int_list(cmd, name, value, 1 << 24, &o->T);
    if (!strcmp(name, "--d"))
        return parse_int_list(cmd, name, value, 4096, &o->d);
    if (!strcmp(name, "--B"))
        return parse_int(cmd, name, value, 1, 1 << 16, &o->B);
    if (!strcmp(name, "--H"))
        return parse_int(cmd, name, value, 1, 1 << 16, &o->H);
    if (!strcmp(name, "--Hkv"))
        return parse_int(cmd, name, value, 1, 1 << 16, &o->Hkv);
    if (!strcmp(name, "--Tq"))
        return parse_int(cmd, name, value, 1, 1 << 24, &o->Tq);
    if (!strcmp(name, "--causal"))
        return o->causal = 1, FL_OK;
    if (!strcmp(name, "--window"))
        return parse_int(cmd, name, value, 0, 1 << 24, &o->window);
    if (!strcmp(name, "--sink-tokens"))
        return parse_int(cmd, name, value, 0, 1 << 24, &o->sink_tokens);
    if (!strcmp(name, "--sinks"))
        return o->sinks = 1, FL_OK;
    if (!strcmp(name, "--reps"))
        return parse_int(cmd, name, value, 1, 100000, &o->reps);
    if (!strcmp(name, "--json"))
        return o->json = 1, FL_OK;
    if (!strcmp(name, "--latent"))
        return parse_int(cmd, name, value, 1, 1 << 16, &o->latent);
    if (!strcmp(name, "--rope-dim")) {
        int rc = parse_int(cmd, name, value, 2, 1 << 16, &o->rope_dim);
        return rc == FL_OK && o->rope_dim % 2 ? usage_error(cmd, "--rope-dim must be even (rotated pairs), got %s",
                                                            value)
                                              : rc;
    }
    if (!strcmp(name, "--model-dim"))
        return parse_int(cmd, name, value, 1, 1 << 20, &o->model_dim);
    if (!strcmp(name, "--q-rank"))
        return parse_int(cmd, name, value, 1, 1 << 20, &o->q_rank);
    return usage_error(cmd, "unknown option '%s'", name);
}

/* Parses argv (after the subcommand). Returns FL_OK, FL_BAD_INPUT, or -1 when help was asked for. */
static int parse_options(Options *o, int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h"))
            return -1;
        if (strncmp(arg, "-", 1) != 0 || !strcmp(arg, "-")) {
            if (o->npositional == MAX_POSITIONAL)
                return usage_error(o->command, "too many arguments (at most %s)", "256");
            o->positional[o->npositional++] = arg;
            continue;
        }
        char name[64];
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        if (len >= sizeof name)
            return usage_error(o->command, "unknown option '%s'", arg);
        memcpy(name, arg, len);
        name[len] = '\0';
        const OptionSpec *spec = NULL;
        for (size_t s = 0; s < sizeof option_specs / sizeof option_specs[0]; s++)
            if (!strcmp(option_specs[s].name, name) && word_in_list(o->command, option_specs[s].commands))
                spec = &option_specs[s];
        if (!spec)
            return usage_error(o->command, "unknown option '%s'", name);
        const char *value = NULL;
        if (spec->takes_value) {
            if (eq)
                value = eq + 1;
            else if (i + 1 < argc)
                value = argv[++i];
            else
                return usage_error(o->command, "option '%s' needs a value", name);
        } else if (eq) {
            return usage_error(o->command, "option '%s' takes no value", name);
        }
        int rc = apply_option(o, name, value);
        if (rc != FL_OK)
            return rc;
    }
    return FL_OK;
}

/* ==== small helpers =========================================================================== */

static const char *golden_dir(void)
{
    const char *env = getenv("FLASHLAB_GOLDEN");
    return env && env[0] ? env : FLASHLAB_SOURCE_DIR "/golden/cases";
}

/* "12.3 MB": decimal units, as memory bandwidth is quoted. */
static const char *human_bytes(double bytes, char *buf, size_t len)
{
    static const char *units[] = {"B", "kB", "MB", "GB", "TB"};
    int u = 0;
    while (bytes >= 1000.0 && u < 4)
        bytes /= 1000.0, u++;
    if (u == 0)
        snprintf(buf, len, "%.0f B", bytes);
    else
        snprintf(buf, len, "%.1f %s", bytes, units[u]);
    return buf;
}

/* Query-key pairs a sliding window (with sink tokens) keeps: per row, the window run plus the
 * sink tokens before it (DESIGN §3). */
static double windowed_pairs(const AttnProblem *p)
{
    double pairs = 0.0;
    for (long i = 0; i < p->Tq; i++) {
        const long pos = i + p->Tk - p->Tq, hi = pos + 1 < 0 ? 0 : pos + 1;
        const long lo = hi - p->window > 0 ? hi - p->window : 0;
        const long se = p->sink_tokens < hi ? p->sink_tokens : hi;
        pairs += (double)(hi - lo + (se < lo ? se : lo));
    }
    return pairs;
}

/* FLOPs of what runner_time times, as the FlashAttention benchmarks count them (DESIGN §8):
 * forward 2·B·Hq·Tq·Tk·(d + dv) (= 4·B·Hq·Tq·Tk·d when d = dv), halved for causal when Tq = Tk;
 * with a window, 2·B·Hq·(d + dv) per query-key pair the window keeps;
 * DIR_BWD times forward + backward: 3.5x forward (the backward alone is 2.5x). */
static double attention_flops(const AttnProblem *p, Direction dir)
{
    double f = 2.0 * p->B * p->Hq * (double)p->Tq * p->Tk * (p->d + p->dv);
    if (p->window > 0)
        f = 2.0 * p->B * p->Hq * windowed_pairs(p) * (p->d + p->dv);
    else if (p->causal && p->Tq == p->Tk)
        f /= 2.0;
    return dir == DIR_BWD ? 3.5 * f : f;
}

/* FLOPs of one MLA step (stage 09), counted the absorbed way for both variants (the work the
 * problem needs; the naive variant does more): the query projections and the W_uk fold, the
 * attention over the latent cache (2·(m + p) per query-key pair for scores, 2·m for P·ckv, per
 * head), the W_uv fold and the output projection. */
static double mla_flops(const MlaProblem *p)
{
    AttnProblem causal = {0}; /* a window longer than Tk is the causal mask */
    causal.Tq = p->Tq, causal.Tk = p->Tk, causal.window = p->Tk + 1;
    const double tokens = (double)p->B * p->Tq;
    const double pairs = p->B * (p->causal ? windowed_pairs(&causal) : (double)p->Tq * p->Tk);
    const double project = (double)p->D * p->mq + (double)p->mq * p->H * (p->dh + p->p) +
                           (double)p->H * p->dh * p->m + (double)p->H * p->m * p->dv +
                           (double)p->H * p->dv * p->D;
    return 2.0 * tokens * project + 2.0 * pairs * p->H * (2.0 * p->m + p->p);
}

static const char *impl_label(const StageImpl *impl, char *buf, size_t len)
{
    snprintf(buf, len, "%s%s%s", device_name(impl->device), impl->variant[0] ? " " : "", impl->variant);
    return buf;
}

static int has_backward(const StageImpl *impl)
{
    return impl->backward && (impl->features & FEAT_BACKWARD);
}

/* Finds the implementation, or explains on stderr why there is none (returns 2) or why it cannot
 * run here (77). */
static int resolve_impl(const Options *o, const char *stage, const StageImpl **impl)
{
    if (o->device == DEVICE_CUDA && !cuda_device_available()) {
        if (!stage_arg_looks_like_stage(stage))
            return usage_error(o->command, "'%s' is not a stage (try 'flashlab list')", stage);
        printf("no CUDA device: skipped (cuda: %s)\n", cuda_device_description());
        return FL_NO_DEVICE;
    }
    *impl = stage_find(stage, o->device, o->variant);
    if (*impl)
        return FL_OK;
    const StageImpl *any = stage_find(stage, o->device, NULL);
    if (any && o->variant) {
        char variants[512] = "";
        const StageImpl *const *all = stage_registry();
        for (int i = 0; all[i]; i++)
            if (!strcmp(all[i]->stage, any->stage) && all[i]->device == o->device) {
                size_t used = strlen(variants);
                snprintf(variants + used, sizeof variants - used, "%s'%s'", used ? ", " : "",
                         all[i]->variant);
            }
        fprintf(stderr, "flashlab %s: stage %s on %s has no variant '%s' (variants: %s)\n", o->command,
                any->stage, device_name(o->device), o->variant, variants);
        return FL_BAD_INPUT;
    }
    Device other = o->device == DEVICE_CPU ? DEVICE_CUDA : DEVICE_CPU;
    if (stage_find(stage, other, NULL)) {
        fprintf(stderr, "flashlab %s: stage %s has no %s implementation (it runs on %s)\n", o->command,
                stage, device_name(o->device), device_name(other));
        return FL_BAD_INPUT;
    }
    fprintf(stderr, "flashlab %s: no stage '%s' in this build (try 'flashlab list')\n", o->command, stage);
    return FL_BAD_INPUT;
}

static RunCtx run_ctx(const Options *o) { return runner_ctx_defaults(&o->ctx); }

/* ---- outputs ---- */

typedef struct {
    Tensor out[OUT_COUNT];
    AttnTensors t;
} Outputs;

static void outputs_free(Outputs *x)
{
    for (int id = 0; id < OUT_COUNT; id++)
        tensor_free(&x->out[id]);
    memset(x, 0, sizeof *x);
}

/* Poisoned (NaN) tensors for every output the problem produces. */
static int outputs_alloc(const AttnProblem *p, Outputs *x, FlError *err)
{
    memset(x, 0, sizeof *x);
    float **slot[OUT_COUNT] = {&x->t.o, &x->t.lse, &x->t.dq, &x->t.dk, &x->t.dv, &x->t.dsinks};
    for (int id = 0; id < OUT_COUNT; id++) {
        if (!output_present(p, (OutputId)id))
            continue;
        int64_t shape[TENSOR_MAX_DIMS];
        int ndim = output_shape(p, (OutputId)id, shape);
        if (tensor_alloc_poisoned(&x->out[id], ndim, shape) != 0) {
            outputs_free(x);
            return fl_fail(err, FL_BAD_INPUT, "out of memory allocating %s", output_file_name((OutputId)id));
        }
        *slot[id] = x->out[id].data;
    }
    return FL_OK;
}

/* Outputs above this size are allocated only after runner_preflight: a stage that refuses the
 * head dims (SRAM, shared memory) says so before gigabytes are allocated and poisoned. */
#define PREFLIGHT_BYTES ((size_t)256 << 20)

static size_t outputs_bytes(const AttnProblem *p)
{
    size_t total = 0;
    for (int id = 0; id < OUT_COUNT; id++) {
        int64_t shape[TENSOR_MAX_DIMS];
        int ndim = output_present(p, (OutputId)id) ? output_shape(p, (OutputId)id, shape) : 0;
        size_t n = ndim > 0 ? sizeof(float) : 0;
        for (int i = 0; i < ndim; i++)
            n *= (size_t)shape[i]; /* the case loader keeps each output under INT_MAX elements */
        total += n;
    }
    return total;
}

/* outputs_alloc, after a preflight run when the outputs are large. */
static int outputs_prepare(const StageImpl *impl, Direction dir, const AttnProblem *p, const RunCtx *ctx,
                           Outputs *x, FlError *err)
{
    memset(x, 0, sizeof *x);
    if (outputs_bytes(p) > PREFLIGHT_BYTES) {
        int rc = runner_preflight(impl, dir, p, ctx, err);
        if (rc != FL_OK)
            return rc;
    }
    return outputs_alloc(p, x, err);
}

/* NaN, or an infinity other than the lse = -inf of a row that sees no key. */
static size_t count_odd_values(OutputId id, const Tensor *t, size_t *first)
{
    size_t n = tensor_numel(t), count = 0;
    for (size_t i = 0; i < n; i++) {
        const float v = t->data[i];
        if (isfinite(v) || (id == OUT_LSE && v == -INFINITY))
            continue;
        if (count++ == 0)
            *first = i;
    }
    return count;
}

/* The non-finite rule (docs/conventions.md): from finite inputs, a NaN or an infinity in an output
 * is worth one warning line per tensor. Inputs with NaN or Inf were warned about on load. */
static void warn_odd_output(const Case *c, OutputId id, const char *file, const Tensor *t)
{
    size_t first = 0, count = t->data && !c->nonfinite_inputs ? count_odd_values(id, t, &first) : 0;
    char index[96];
    if (count)
        fl_warn("%s: %s has %zu non-finite value%s from finite inputs, the first at %s", c->name, file,
                count, count == 1 ? "" : "s", tensor_index_str(t, first, index, sizeof index));
}

static void warn_odd_outputs(const Case *c, const Outputs *x)
{
    for (int id = 0; id < OUT_COUNT; id++)
        warn_odd_output(c, (OutputId)id, output_file_name((OutputId)id), &x->out[id]);
}

/* Why impl has no backward pass: a stage before 06 has not reached it yet; a later one (11, the
 * decoding step) is forward only by design. */
static const char *no_backward_reason(const StageImpl *impl)
{
    return strcmp(impl->stage, attn_feature_added_by(FEAT_BACKWARD)) < 0 ? "stage 06 adds it"
                                                                          : "it is a forward-only stage";
}

/* The direction a case runs in: forward-only stages, or --direction fwd, ignore do.npy. */
static Direction case_direction(const Options *o, const StageImpl *impl, const Case *c)
{
    if (o->direction == DIR_FWD || !c->problem.dout || !has_backward(impl))
        return DIR_FWD;
    return DIR_BWD;
}

static AttnProblem problem_for(const Case *c, Direction dir)
{
    AttnProblem p = c->problem;
    if (dir == DIR_FWD)
        p.dout = NULL;
    return p;
}

/* One compared tensor, for check --json. */
typedef struct {
    const char *name;
    CheckResult r;
} TensorGrade;

/* Compares every output of the run with the case's expected files, at the tolerance of the
 * precision the stage computes in (check_tolerance). Fills *max_err and, when grades is non-NULL,
 * one TensorGrade per compared tensor (*ngrades of them); returns the number of failing tensors.
 * print: one line per tensor (check_print) with this indent. */
static int compare_outputs(const Case *c, const Outputs *x, Precision precision, int print, double *max_err,
                           TensorGrade *grades, int *ngrades)
{
    int failed = 0;
    *max_err = 0.0;
    if (ngrades)
        *ngrades = 0;
    for (int id = 0; id < OUT_COUNT; id++) {
        const Tensor *got = &x->out[id];
        if (!got->data)
            continue;
        const char *name = output_file_name((OutputId)id);
        const Tensor *want = &c->expected[id];
        if (!want->data) {
            fprintf(stderr, "    %s: no expected file in %s\n", name, c->dir);
            failed++;
            continue;
        }
        const double tol = check_tolerance(precision, id > OUT_LSE);
        CheckResult r;
        if (check_tensor(got, want, tol, tol, &r) != 0) {
            char a[64], b[64];
            fprintf(stderr, "    %s: shape %s but the expected file has %s\n", name,
                    tensor_shape_str(got, a, sizeof a), tensor_shape_str(want, b, sizeof b));
            failed++;
            continue;
        }
        if (print) {
            char label[80];
            snprintf(label, sizeof label, "    %s", name);
            check_print(stdout, label, got, &r);
        }
        if (grades)
            grades[(*ngrades)++] = (TensorGrade){name, r};
        if (r.max_abs_err > *max_err)
            *max_err = r.max_abs_err;
        failed += r.mismatches != 0;
    }
    return failed;
}

/* Exit code of several results: bad input beats unsupported beats no device beats failure. */
static int worse(int a, int b)
{
    static const int rank[] = {FL_OK, FL_CHECK_FAILED, FL_NO_DEVICE, FL_UNSUPPORTED, FL_BAD_INPUT};
    int ra = 0, rb = 0;
    for (int i = 0; i < 5; i++) {
        if (rank[i] == a)
            ra = i;
        if (rank[i] == b)
            rb = i;
    }
    return ra >= rb ? a : b;
}

/* Case folders in dir, sorted; *names is malloc'ed, free with free_names. */
static int list_subdirs(const char *dir, char ***names, int *count, FlError *err)
{
    struct dirent **entries;
    int n = scandir(dir, &entries, NULL, alphasort);
    if (n < 0)
        return fl_fail(err, FL_BAD_INPUT, "%s: cannot read the folder (%s)", dir, strerror(errno));
    *names = calloc((size_t)n + 1, sizeof **names);
    *count = 0;
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, entries[i]->d_name);
        if (*names && entries[i]->d_name[0] != '.' && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
            (*names)[(*count)++] = strdup(path);
        free(entries[i]);
    }
    free(entries);
    if (!*names)
        return fl_fail(err, FL_BAD_INPUT, "out of memory listing %s", dir);
    return FL_OK;
}

static void free_names(char **names, int count)
{
    for (int i = 0; i < count; i++)
        free(names[i]);
    free(names);
}

static int file_exists(const char *dir, const char *name)
{
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0;
}

/* ==== list ===================================================================================== */

static const char *feature_list(unsigned features, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "forward");
    for (unsigned bit = 0; bit < FEAT_COUNT && used < len; bit++)
        if (features & (1u << bit))
            used += (size_t)snprintf(buf + used, len - used, ",%s", attn_feature_name(1u << bit));
    return buf;
}

/* "float32", or "bf16" with the head dims when the stage runs only some ("bf16 d=64,128"). */
static const char *precision_label(const StageImpl *impl, char *buf, size_t len)
{
    const char *name = impl->precision == PRECISION_BF16 ? "bf16" : "float32";
    char dims[48];
    stage_head_dims_text(impl, ",", dims, sizeof dims);
    snprintf(buf, len, dims[0] ? "%s d=%s" : "%s", name, dims);
    return buf;
}

static int cmd_list(Options *o)
{
    if (o->npositional > 0)
        return usage_error("list", "unexpected argument '%s'", o->positional[0]);
    const StageImpl *const *all = stage_registry();
    if (!all[0]) {
        printf("no stages in this build yet (stages/NN_name/CMakeLists.txt registers them)\n");
        return FL_OK;
    }
    printf("%-5s  %-16s  %-6s  %-10s  %-13s  %-48s  %s\n", "stage", "name", "device", "variant", "precision",
           "features", "lesson");
    for (int i = 0; all[i]; i++) {
        char features[256], precision[48];
        printf("%-5s  %-16s  %-6s  %-10s  %-13s  %-48s  %s\n", all[i]->stage, all[i]->name,
               device_name(all[i]->device), all[i]->variant[0] ? all[i]->variant : "-",
               precision_label(all[i], precision, sizeof precision),
               feature_list(all[i]->features, features, sizeof features), all[i]->lesson);
    }
    printf("cuda device: %s\n", cuda_device_available() ? cuda_device_description() : "none");
    return FL_OK;
}

/* ==== check ==================================================================================== */

typedef struct {
    int checked, passed, skipped;
    int code; /* worst status so far */
    int json_cases; /* check --json: case objects printed so far */
} CheckTally;

/* ---- check --json: the grade report, one object per case ----
 * {"case", "dir", "direction", "status": "pass" | "fail" | "error", "tensors": {name: {max_abs,
 * max_rel, mismatches}}, "hbm_read_bytes", "hbm_written_bytes" (all passes of the run), the same
 * two for the reference (the stage's default variant on the same device and case), "time_ms"
 * (median of 3 runs after one warm-up, counting off), "error": null or the message}. */
typedef struct {
    uint64_t read, written, ref_read, ref_written;
    double ms;
} GradeNumbers;

static void json_string(const char *s);

static void json_case(const Case *c, const char *direction, const char *status, const TensorGrade *grades,
                      int ngrades, const GradeNumbers *g, const char *error, CheckTally *tally)
{
    printf("%s\n    {\"case\": ", tally->json_cases++ ? "," : "");
    json_string(c->name);
    printf(", \"dir\": ");
    json_string(c->dir);
    printf(", \"direction\": \"%s\", \"status\": \"%s\", \"tensors\": {", direction, status);
    for (int i = 0; i < ngrades; i++)
        printf("%s\"%s\": {\"max_abs\": %.6g, \"max_rel\": %.6g, \"mismatches\": %zu}", i ? ", " : "",
               grades[i].name, grades[i].r.max_abs_err, grades[i].r.max_rel_err, grades[i].r.mismatches);
    printf("}");
    if (g)
        printf(", \"hbm_read_bytes\": %llu, \"hbm_written_bytes\": %llu, \"reference_hbm_read_bytes\": %llu, "
               "\"reference_hbm_written_bytes\": %llu, \"time_ms\": %.6g",
               (unsigned long long)g->read, (unsigned long long)g->written, (unsigned long long)g->ref_read,
               (unsigned long long)g->ref_written, g->ms);
    printf(", \"error\": ");
    if (error)
        json_string(error);
    else
        printf("null");
    printf("}");
}

/* The reference of a graded implementation: the same stage's default variant on its device. */
static const StageImpl *reference_impl(const StageImpl *impl)
{
    const StageImpl *ref = stage_find(impl->stage, impl->device, "");
    return ref ? ref : impl;
}

/* Counts of the reference on the same problem, and the graded implementation's time. */
static int grade_attention(const Options *o, const StageImpl *impl, Direction dir, const AttnProblem *p,
                           const RunStats *stats, GradeNumbers *g, FlError *err)
{
    RunCtx ctx = run_ctx(o);
    RunStats ref = *stats;
    Outputs x;
    int rc = FL_OK;
    if (reference_impl(impl) != impl) {
        rc = outputs_alloc(p, &x, err);
        if (rc == FL_OK)
            rc = runner_run(reference_impl(impl), dir, p, &x.t, &ctx, &ref, err);
        outputs_free(&x);
    }
    g->read = stats->fwd.bytes_read + stats->bwd.bytes_read;
    g->written = stats->fwd.bytes_written + stats->bwd.bytes_written;
    g->ref_read = ref.fwd.bytes_read + ref.bwd.bytes_read;
    g->ref_written = ref.fwd.bytes_written + ref.bwd.bytes_written;
    if (rc == FL_OK)
        rc = runner_time(impl, dir, p, &ctx, 1, 3, &g->ms, err);
    return rc;
}

static int grade_mla(const Options *o, const StageImpl *impl, const MlaProblem *p, const RunStats *stats,
                     GradeNumbers *g, FlError *err)
{
    RunCtx ctx = run_ctx(o);
    RunStats ref = *stats;
    int rc = FL_OK;
    if (reference_impl(impl) != impl) {
        float *y = malloc(mla_numel(p, MLA_INPUT_COUNT) * sizeof(float));
        rc = y ? runner_run_mla(reference_impl(impl), p, y, &ctx, &ref, err)
               : fl_fail(err, FL_BAD_INPUT, "out of memory for the reference run");
        free(y);
    }
    g->read = stats->fwd.bytes_read, g->written = stats->fwd.bytes_written;
    g->ref_read = ref.fwd.bytes_read, g->ref_written = ref.fwd.bytes_written;
    if (rc == FL_OK)
        rc = runner_time_mla(impl, p, &ctx, 1, 3, &g->ms, err);
    return rc;
}

static void print_case_header(const Case *c, Direction dir, const AttnProblem *p, int verbose)
{
    printf("%s (%s): B=%d Hq=%d Hkv=%d Tq=%d Tk=%d d=%d dv=%d%s%s\n", c->name,
           dir == DIR_BWD ? "fwd+bwd" : "fwd", p->B, p->Hq, p->Hkv, p->Tq, p->Tk, p->d, p->dv,
           p->causal ? " causal" : "", p->sinks ? " sinks" : "");
    if (verbose && c->description[0])
        printf("    %s\n", c->description);
}

/* A run that did not complete: its message, and the status it adds to the tally. */
static void tally_run_error(const Options *o, const Case *c, const char *direction, int rc, const FlError *err,
                            CheckTally *tally)
{
    fprintf(stderr, "flashlab check: %s: %s\n", c->dir, err->msg);
    if (o->json)
        json_case(c, direction, "error", NULL, 0, NULL, err->msg, tally);
    tally->code = worse(tally->code, rc == FL_CHECK_FAILED ? FL_BAD_INPUT : rc);
    if (rc != FL_UNSUPPORTED && rc != FL_NO_DEVICE)
        tally->checked++;
}

static void tally_result(int failed_tensors, CheckTally *tally)
{
    tally->checked++;
    if (failed_tensors == 0)
        tally->passed++;
    else
        tally->code = worse(tally->code, FL_CHECK_FAILED);
}

static void print_hbm_line(const char *pass, const HbmCounter *c, size_t extra)
{
    char r[32], w[32], e[32];
    printf("    hbm %s: read %s, written %s, extra %s\n", pass, human_bytes((double)c->bytes_read, r, 32),
           human_bytes((double)c->bytes_written, w, 32), human_bytes((double)extra, e, 32));
}

/* Runs one loaded case and compares; explicit: the user named it (unsupported -> exit 3). */
static void check_one_case(const Options *o, const StageImpl *impl, Case *c, int explicit,
                           CheckTally *tally)
{
    if (o->direction == DIR_BWD && !c->problem.dout) {
        if (explicit) {
            fprintf(stderr, "flashlab check: %s: no do.npy, so no backward pass to check (--direction bwd)\n",
                    c->dir);
            tally->code = worse(tally->code, FL_BAD_INPUT);
        } else {
            tally->skipped++;
        }
        return;
    }
    Direction dir = case_direction(o, impl, c);
    AttnProblem p = problem_for(c, dir);
    if (runner_missing_features(impl, dir, &p) && !explicit) {
        if (o->verbose)
            printf("%s: skipped (needs features stage %s lacks)\n", c->name, impl->stage);
        tally->skipped++;
        return;
    }
    if (!runner_head_dims_ok(impl, &p) && !explicit) {
        char precision[48];
        if (o->verbose)
            printf("%s: skipped (d = %d, dv = %d: stage %s runs %s only)\n", c->name, p.d, p.dv, impl->stage,
                   precision_label(impl, precision, sizeof precision));
        tally->skipped++;
        return;
    }
    FlError err = {{0}};
    Outputs x;
    RunStats stats;
    RunCtx ctx = run_ctx(o);
    int rc = outputs_prepare(impl, dir, &p, &ctx, &x, &err);
    if (rc == FL_OK)
        rc = runner_run(impl, dir, &p, &x.t, &ctx, &stats, &err);
    if (rc == FL_OK)
        warn_odd_outputs(c, &x);
    const char *direction = dir == DIR_BWD ? "fwd+bwd" : "fwd";
    if (rc != FL_OK) {
        tally_run_error(o, c, direction, rc, &err, tally);
        outputs_free(&x);
        return;
    }
    if (!o->json) {
        print_case_header(c, dir, &p, o->verbose);
        if (o->verbose) {
            print_hbm_line("fwd", &stats.fwd, stats.extra_bytes_fwd);
            if (dir == DIR_BWD)
                print_hbm_line("bwd", &stats.bwd, stats.extra_bytes_bwd);
        }
    }
    double max_err;
    TensorGrade grades[OUT_COUNT];
    int ngrades;
    const int failed = compare_outputs(c, &x, impl->precision, !o->json, &max_err, grades, &ngrades);
    outputs_free(&x);
    tally_result(failed, tally);
    if (o->json) {
        GradeNumbers g;
        rc = grade_attention(o, impl, dir, &p, &stats, &g, &err);
        json_case(c, direction, failed ? "fail" : "pass", grades, ngrades, &g, rc == FL_OK ? NULL : err.msg, tally);
    }
}

/* ---- MLA cases (stage 09): one output, y ---- */

static int mla_y_alloc(const MlaProblem *p, Tensor *y, FlError *err)
{
    int64_t shape[4];
    int ndim = mla_shape(p, MLA_INPUT_COUNT, shape);
    memset(y, 0, sizeof *y);
    if (tensor_alloc_poisoned(y, ndim, shape) != 0)
        return fl_fail(err, FL_BAD_INPUT, "out of memory allocating y (%zu floats)", mla_numel(p, MLA_INPUT_COUNT));
    return FL_OK;
}

/* Compares y with the case's y.npy at the forward tolerance of the stage's precision; returns 1 if
 * it fails. print: the check_print line; r (may be NULL) receives the comparison. */
static int compare_mla(const Case *c, const Tensor *y, Precision precision, int print, double *max_err,
                       CheckResult *r_out)
{
    CheckResult r;
    const double tol = check_tolerance(precision, 0);
    check_tensor(y, &c->mla_y, tol, tol, &r); /* shapes agree: both from c->mla */
    if (print)
        check_print(stdout, "    y.npy", y, &r);
    if (r_out)
        *r_out = r;
    *max_err = r.max_abs_err;
    return r.mismatches != 0;
}

static void check_one_mla_case(const Options *o, const StageImpl *impl, Case *c, CheckTally *tally)
{
    const MlaProblem *p = &c->mla;
    FlError err = {{0}};
    Tensor y;
    RunStats stats;
    RunCtx ctx = run_ctx(o);
    int rc = mla_y_alloc(p, &y, &err);
    if (rc == FL_OK)
        rc = runner_run_mla(impl, p, y.data, &ctx, &stats, &err);
    if (rc == FL_OK)
        warn_odd_output(c, OUT_O, mla_file_name(MLA_INPUT_COUNT), &y);
    if (rc != FL_OK) {
        tally_run_error(o, c, "mla", rc, &err, tally);
        tensor_free(&y);
        return;
    }
    if (!o->json) {
        printf("%s (mla): B=%d Tq=%d Tk=%d D=%d mq=%d H=%d dh=%d m=%d p=%d dv=%d%s\n", c->name, p->B, p->Tq,
               p->Tk, p->D, p->mq, p->H, p->dh, p->m, p->p, p->dv, p->causal ? " causal" : "");
        if (o->verbose && c->description[0])
            printf("    %s\n", c->description);
        if (o->verbose)
            print_hbm_line("fwd", &stats.fwd, stats.extra_bytes_fwd);
    }
    double max_err;
    TensorGrade grade;
    memset(&grade, 0, sizeof grade);
    grade.name = mla_file_name(MLA_INPUT_COUNT);
    const int failed = compare_mla(c, &y, impl->precision, !o->json, &max_err, &grade.r);
    tensor_free(&y);
    tally_result(failed, tally);
    if (o->json) {
        GradeNumbers g;
        rc = grade_mla(o, impl, p, &stats, &g, &err);
        json_case(c, "mla", failed ? "fail" : "pass", &grade, 1, &g, rc == FL_OK ? NULL : err.msg, tally);
    }
}

static int check_case_dir(const Options *o, const StageImpl *impl, const char *dir, int explicit,
                          CheckTally *tally)
{
    if (!explicit && !file_exists(dir, "q.npy") && !file_exists(dir, "ckv.npy")) {
        if (o->verbose)
            printf("%s: skipped (no q.npy or ckv.npy: not a case)\n", dir);
        return FL_OK;
    }
    Case c;
    FlError err = {{0}};
    int rc = case_load(dir, 1, &c, &err);
    if (rc != FL_OK) {
        fprintf(stderr, "flashlab check: %s\n", err.msg);
        tally->code = worse(tally->code, rc);
        return rc;
    }
    const int stage_mla = impl->mla_forward != NULL;
    if (c.is_mla != stage_mla && !explicit) { /* MLA cases belong to stage 09, the others not */
        if (o->verbose)
            printf("%s: skipped (%s case)\n", c.name, c.is_mla ? "an MLA" : "not an MLA");
        tally->skipped++;
    } else if (c.is_mla) {
        check_one_mla_case(o, impl, &c, tally);
    } else {
        check_one_case(o, impl, &c, explicit, tally);
    }
    case_free(&c);
    return FL_OK;
}

static int cmd_check(Options *o)
{
    if (o->npositional < 1)
        return usage_error("check", "missing %s", "STAGE");
    const StageImpl *impl;
    int rc = resolve_impl(o, o->positional[0], &impl);
    if (rc != FL_OK)
        return rc;
    if (o->direction == DIR_BWD && !has_backward(impl)) {
        if (impl->mla_forward)
            fprintf(stderr, "flashlab check: stage %s (%s) computes an MLA step forward only: no backward pass\n",
                    impl->stage, impl->name);
        else
            fprintf(stderr, "flashlab check: stage %s (%s) has no backward pass; %s\n", impl->stage,
                    impl->name, no_backward_reason(impl));
        return FL_UNSUPPORTED;
    }
    CheckTally tally = {0, 0, 0, FL_OK, 0};
    char label[64];
    if (o->json) { /* the grade report: one JSON object on stdout, messages still on stderr */
        o->verbose = 0;
        printf("{\"stage\": \"%s\", \"name\": \"%s\", \"variant\": \"%s\", \"device\": \"%s\", "
               "\"reference_variant\": \"%s\", \"precision\": \"%s\", \"tolerance\": {\"forward\": %g, "
               "\"gradients\": %g}, \"cases\": [",
               impl->stage, impl->name, impl->variant, device_name(impl->device), reference_impl(impl)->variant,
               impl->precision == PRECISION_BF16 ? "bf16" : "float32", check_tolerance(impl->precision, 0),
               check_tolerance(impl->precision, 1));
    }
    if (o->npositional > 1) {
        for (int i = 1; i < o->npositional; i++)
            check_case_dir(o, impl, o->positional[i], 1, &tally);
    } else {
        char **dirs;
        int n;
        FlError err = {{0}};
        if (list_subdirs(golden_dir(), &dirs, &n, &err) != FL_OK) {
            fprintf(stderr, "flashlab check: %s (set FLASHLAB_GOLDEN or name case folders)\n", err.msg);
            return FL_BAD_INPUT;
        }
        for (int i = 0; i < n; i++)
            check_case_dir(o, impl, dirs[i], 0, &tally);
        free_names(dirs, n);
    }
    if (o->json)
        printf("\n  ], \"checked\": %d, \"passed\": %d, \"failed\": %d, \"skipped\": %d}\n", tally.checked,
               tally.passed, tally.checked - tally.passed, tally.skipped);
    if (tally.checked == 0 && tally.code != FL_OK)
        return tally.code;
    if (!o->json)
        printf("stage %s (%s, %s): %d case%s checked, %d passed, %d failed", impl->stage, impl->name,
           impl_label(impl, label, sizeof label), tally.checked, tally.checked == 1 ? "" : "s", tally.passed,
           tally.checked - tally.passed);
    if (tally.skipped && !o->json)
        printf("; %d golden case%s skipped (features, head dims or direction this run does not cover)", tally.skipped,
               tally.skipped == 1 ? "" : "s");
    if (!o->json)
        printf("\n");
    if (tally.code == FL_OK && tally.checked == 0) {
        fprintf(stderr, "flashlab check: no case was checked for stage %s%s: that is not a pass\n", impl->stage,
                o->direction == DIR_BWD ? " --direction bwd" : "");
        return FL_BAD_INPUT;
    }
    return tally.code;
}

/* ==== run ====================================================================================== */

/* mkdir -p; *created_last = 1 when the final folder did not exist before. */
static int make_dirs(const char *path, int *created_last, FlError *err)
{
    char buf[4096];
    *created_last = 0;
    if (strlen(path) >= sizeof buf)
        return fl_fail(err, FL_BAD_INPUT, "%s: path too long", path);
    strcpy(buf, path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(buf, 0777) == 0) {
            *created_last = saved == '\0' || p[1] == '\0';
        } else if (errno != EEXIST) {
            return fl_fail(err, FL_BAD_INPUT, "%s: cannot create the folder (%s)", buf, strerror(errno));
        } else {
            struct stat st;
            if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
                return fl_fail(err, FL_BAD_INPUT, "%s: exists and is not a folder", buf);
        }
        *p = saved;
        if (saved == '\0')
            break;
    }
    return FL_OK;
}

/* Writes n tensors as DIR/names[i]; on any failure removes the files already written (and the
 * folder, when this call created it), so no half result is left behind. */
static int write_tensors(const char *out_dir, const char *const *names, const Tensor *const *tensors,
                         int n, FlError *err)
{
    int created;
    int rc = make_dirs(out_dir, &created, err);
    if (rc != FL_OK)
        return rc;
    char written[OUT_COUNT][4096];
    int nwritten = 0;
    for (int i = 0; i < n && i < OUT_COUNT && rc == FL_OK; i++) {
        snprintf(written[nwritten], sizeof written[0], "%s/%s", out_dir, names[i]);
        rc = npy_write(written[nwritten], tensors[i], err);
        if (rc == FL_OK)
            nwritten++;
    }
    if (rc != FL_OK) {
        for (int i = 0; i < nwritten; i++)
            unlink(written[i]);
        if (created)
            rmdir(out_dir);
        return rc;
    }
    for (int i = 0; i < nwritten; i++)
        printf("wrote %s\n", written[i]);
    return FL_OK;
}

/* Every output the run produced. */
static int write_outputs(const char *out_dir, const Outputs *x, FlError *err)
{
    const char *names[OUT_COUNT];
    const Tensor *tensors[OUT_COUNT];
    int n = 0;
    for (int id = 0; id < OUT_COUNT; id++)
        if (x->out[id].data) {
            names[n] = output_file_name((OutputId)id);
            tensors[n++] = &x->out[id];
        }
    return write_tensors(out_dir, names, tensors, n, err);
}

/* flashlab run on an MLA case: y.npy. */
static int run_mla_case(const Options *o, const StageImpl *impl, const Case *c)
{
    if (o->direction == DIR_BWD) {
        fprintf(stderr, "flashlab run: stage %s: MLA cases have no backward pass (--direction bwd)\n",
                impl->stage);
        return FL_UNSUPPORTED;
    }
    FlError err = {{0}};
    Tensor y;
    RunCtx ctx = run_ctx(o);
    const char *name = mla_file_name(MLA_INPUT_COUNT);
    const Tensor *out = &y;
    int rc = mla_y_alloc(&c->mla, &y, &err);
    if (rc == FL_OK)
        rc = runner_run_mla(impl, &c->mla, y.data, &ctx, NULL, &err);
    if (rc == FL_OK) {
        warn_odd_output(c, OUT_O, name, &y);
        rc = write_tensors(o->out_dir, &name, &out, 1, &err);
    }
    if (rc != FL_OK) {
        if (rc == FL_NO_DEVICE)
            printf("no CUDA device: skipped\n");
        fprintf(stderr, "flashlab run: %s\n", err.msg);
    }
    tensor_free(&y);
    return rc == FL_CHECK_FAILED ? FL_BAD_INPUT : rc;
}

static int cmd_run(Options *o)
{
    if (o->npositional < 2)
        return usage_error("run", "missing %s", o->npositional < 1 ? "STAGE and CASE_DIR" : "CASE_DIR");
    if (o->npositional > 2)
        return usage_error("run", "one case folder at a time, got extra argument '%s'", o->positional[2]);
    if (!o->out_dir)
        return usage_error("run", "missing %s", "--out DIR");
    const StageImpl *impl;
    int rc = resolve_impl(o, o->positional[0], &impl);
    if (rc != FL_OK)
        return rc;
    Case c;
    FlError err = {{0}};
    rc = case_check_out_dir(o->out_dir, &err);
    if (rc == FL_OK)
        rc = case_load(o->positional[1], 0, &c, &err);
    if (rc != FL_OK) {
        fprintf(stderr, "flashlab run: %s\n", err.msg);
        return rc;
    }
    if (c.is_mla) {
        rc = run_mla_case(o, impl, &c);
        case_free(&c);
        return rc;
    }
    if (o->direction == DIR_BWD && (!c.problem.dout || !has_backward(impl))) {
        fprintf(stderr, "flashlab run: --direction bwd needs %s\n",
                c.problem.dout ? "a stage with a backward pass (stage 06 on)" : "do.npy in the case folder");
        int code = c.problem.dout ? FL_UNSUPPORTED : FL_BAD_INPUT;
        case_free(&c);
        return code;
    }
    Direction dir = case_direction(o, impl, &c);
    if (c.problem.dout && dir == DIR_FWD && o->direction != DIR_FWD)
        fprintf(stderr, "flashlab run: note: stage %s has no backward pass (%s); do.npy ignored\n",
                impl->stage, no_backward_reason(impl));
    AttnProblem p = problem_for(&c, dir);
    Outputs x;
    RunCtx ctx = run_ctx(o);
    rc = outputs_prepare(impl, dir, &p, &ctx, &x, &err);
    if (rc == FL_OK)
        rc = runner_run(impl, dir, &p, &x.t, &ctx, NULL, &err);
    if (rc == FL_OK) {
        warn_odd_outputs(&c, &x);
        rc = write_outputs(o->out_dir, &x, &err);
    }
    if (rc != FL_OK) {
        if (rc == FL_NO_DEVICE)
            printf("no CUDA device: skipped\n");
        fprintf(stderr, "flashlab run: %s\n", err.msg);
    }
    outputs_free(&x);
    case_free(&c);
    return rc == FL_CHECK_FAILED ? FL_BAD_INPUT : rc;
}

/* ==== tour ===================================================================================== */

/* The row's first columns; 0 when a CUDA row has no device (the row then says so and ends). */
static int tour_row_start(const StageImpl *impl)
{
    char dev[48];
    printf("%-5s  %-12s  ", impl->stage, impl_label(impl, dev, sizeof dev));
    if (impl->device == DEVICE_CUDA && !cuda_device_available()) {
        printf("skipped (no CUDA device)  %s\n", impl->lesson);
        return 0;
    }
    return 1;
}

/* One row of the tour table: runs, checks, counts and times one implementation. Returns 1 if the
 * row failed. */
static int tour_row(const Options *o, const StageImpl *impl, const Case *c)
{
    char err_s[32], r[32], w[32], e[32];
    if (!tour_row_start(impl))
        return 0;
    Direction dir = case_direction(o, impl, c);
    AttnProblem p = problem_for(c, dir);
    unsigned missing = runner_missing_features(impl, dir, &p);
    if (missing) {
        unsigned first = missing & (~missing + 1);
        printf("n/a: case needs %s (stage %s)  %s\n", attn_feature_name(first), attn_feature_added_by(first),
               impl->lesson);
        return 0;
    }
    if (!runner_head_dims_ok(impl, &p)) {
        char precision[48];
        printf("n/a: case has d = %d, dv = %d; the stage runs %s  %s\n", p.d, p.dv,
               precision_label(impl, precision, sizeof precision), impl->lesson);
        return 0;
    }
    FlError err = {{0}};
    Outputs x;
    RunStats stats;
    RunCtx ctx = run_ctx(o);
    double max_err = 0.0, ms = 0.0;
    int rc = outputs_prepare(impl, dir, &p, &ctx, &x, &err);
    if (rc == FL_OK)
        rc = runner_run(impl, dir, &p, &x.t, &ctx, &stats, &err);
    int failed = rc == FL_OK ? compare_outputs(c, &x, impl->precision, 0, &max_err, NULL, NULL) : 0;
    outputs_free(&x);
    AttnProblem fwd = problem_for(c, DIR_FWD);
    double ms_both = 0.0;
    if (rc == FL_OK)
        rc = runner_time(impl, DIR_FWD, &fwd, &ctx, 1, TOUR_REPS, &ms, &err);
    if (rc == FL_OK && dir == DIR_BWD)
        rc = runner_time(impl, DIR_BWD, &p, &ctx, 1, TOUR_REPS, &ms_both, &err);
    if (rc != FL_OK) {
        printf("FAIL  error: %s\n", err.msg);
        return 1;
    }
    snprintf(err_s, sizeof err_s, "%.1e", max_err);
    printf("%-7s  %-4s  %-8s  %9s  %9s  %9s  %9.3f  %8.2f  %s\n", dir == DIR_BWD ? "fwd+bwd" : "fwd",
           failed ? "FAIL" : "pass", err_s, human_bytes((double)stats.fwd.bytes_read, r, sizeof r),
           human_bytes((double)stats.fwd.bytes_written, w, sizeof w),
           human_bytes((double)stats.extra_bytes_fwd, e, sizeof e), ms, attention_flops(&fwd, DIR_FWD) / (ms * 1e6),
           impl->lesson);
    if (dir == DIR_BWD) /* the backward pass's own counters; time and rate of forward + backward */
        printf("%-5s  %-12s  %-7s  %-4s  %-8s  %9s  %9s  %9s  %9.3f  %8.2f  (backward pass; time: fwd+bwd)\n",
               "", "", "bwd", "", "", human_bytes((double)stats.bwd.bytes_read, r, sizeof r),
               human_bytes((double)stats.bwd.bytes_written, w, sizeof w),
               human_bytes((double)stats.extra_bytes_bwd, e, sizeof e), ms_both,
               attention_flops(&p, DIR_BWD) / (ms_both * 1e6));
    return failed != 0;
}

/* A tour row of an MLA stage (09), on the MLA tour case. Returns 1 if the row failed. */
static int tour_mla_row(const StageImpl *impl, const Case *c, const RunCtx *ctx)
{
    char err_s[32], r[32], w[32], e[32];
    if (!tour_row_start(impl))
        return 0;
    FlError err = {{0}};
    Tensor y;
    RunStats stats;
    double max_err = 0.0, ms = 0.0;
    int rc = mla_y_alloc(&c->mla, &y, &err);
    if (rc == FL_OK)
        rc = runner_run_mla(impl, &c->mla, y.data, ctx, &stats, &err);
    int failed = rc == FL_OK ? compare_mla(c, &y, impl->precision, 0, &max_err, NULL) : 0;
    tensor_free(&y);
    if (rc == FL_OK)
        rc = runner_time_mla(impl, &c->mla, ctx, 1, TOUR_REPS, &ms, &err);
    if (rc != FL_OK) {
        printf("FAIL  error: %s\n", err.msg);
        return 1;
    }
    snprintf(err_s, sizeof err_s, "%.1e", max_err);
    printf("%-7s  %-4s  %-8s  %9s  %9s  %9s  %9.3f  %8.2f  %s (%s)\n", "mla", failed ? "FAIL" : "pass", err_s,
           human_bytes((double)stats.fwd.bytes_read, r, sizeof r), human_bytes((double)stats.fwd.bytes_written, w, sizeof w),
           human_bytes((double)stats.extra_bytes_fwd, e, sizeof e), ms, mla_flops(&c->mla) / (ms * 1e6),
           impl->lesson, TOUR_MLA_CASE);
    return failed;
}

static int tour_load(const char *name, Case *c)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", golden_dir(), name);
    FlError err = {{0}};
    int rc = case_load(dir, 1, c, &err);
    if (rc != FL_OK)
        fprintf(stderr, "flashlab tour: %s\n", err.msg);
    return rc;
}

static int cmd_tour(Options *o)
{
    if (o->npositional > 0)
        return usage_error("tour", "unexpected argument '%s'", o->positional[0]);
    if (!o->device_all && o->device == DEVICE_CUDA && !cuda_device_available()) {
        printf("no CUDA device: skipped (cuda: %s)\n", cuda_device_description());
        return FL_NO_DEVICE;
    }
    Case c, mla;
    int rc = tour_load("tour", &c);
    if (rc != FL_OK)
        return rc;
    rc = tour_load(TOUR_MLA_CASE, &mla);
    if (rc != FL_OK) {
        case_free(&c);
        return rc;
    }
    const AttnProblem *p = &c.problem;
    printf("tour case %s/tour: B=%d Hq=%d Hkv=%d Tq=%d Tk=%d d=%d dv=%d%s%s\n", golden_dir(), p->B, p->Hq,
           p->Hkv, p->Tq, p->Tk, p->d, p->dv, p->causal ? " causal" : "", p->dout ? ", with dO" : "");
    printf("HBM read/written and extra memory: forward pass (a 'bwd' line below a row: the backward pass);\n"
           "time: median of %d runs of the forward (on a 'bwd' line: forward + backward); "
           "SRAM M = %zu bytes for the tiled CPU stages;\n"
           "stage 09 (MLA) rows run the MLA case %s instead ('mla' in the checked column)\n\n",
           TOUR_REPS, run_ctx(o).sram_bytes, TOUR_MLA_CASE);
    printf("%-5s  %-12s  %-7s  %-4s  %-8s  %9s  %9s  %9s  %9s  %8s  %s\n", "stage", "device", "checked", "ok?",
           "max err", "HBM read", "HBM write", "extra mem", "time ms", "GFLOP/s", "lesson");
    const StageImpl *const *all = stage_registry();
    int rows = 0, failed = 0;
    RunCtx ctx = run_ctx(o);
    for (int i = 0; all[i]; i++) {
        if (!o->device_all && all[i]->device != o->device)
            continue;
        failed += all[i]->mla_forward ? tour_mla_row(all[i], &mla, &ctx) : tour_row(o, all[i], &c);
        rows++;
    }
    case_free(&c);
    case_free(&mla);
    if (rows == 0) {
        fprintf(stderr, "flashlab tour: no stages in this build for this device: nothing ran\n");
        return FL_BAD_INPUT;
    }
    printf("\ncuda device: %s\n", cuda_device_available() ? cuda_device_description() : "none");
    printf("%d row%s, %d failed\n", rows, rows == 1 ? "" : "s", failed);
    return failed ? FL_CHECK_FAILED : FL_OK;
}

/* ==== bench ==================================================================================== */

typedef struct {
    Tensor q, k, v, dout, sinks;
    Tensor block_table, seq_lens; /* a paged cache (--page-size): int32 */
} BenchInputs;

static void bench_inputs_free(BenchInputs *in)
{
    tensor_free(&in->block_table);
    tensor_free(&in->seq_lens);
    tensor_free(&in->sinks);
    tensor_free(&in->q);
    tensor_free(&in->k);
    tensor_free(&in->v);
    tensor_free(&in->dout);
}

/* x[0..n) seeded N(0, 1). Above 2^24 elements the first 2^24 are drawn and then repeated: drawing
 * billions of normals would take the bench minutes, and the time of a kernel does not depend on
 * the values it reads (none of them is NaN or inf). */
static void bench_fill_normal(Rng *rng, float *x, size_t n)
{
    const size_t drawn = n < ((size_t)1 << 24) ? n : (size_t)1 << 24;
    rng_fill_normal(rng, x, drawn, 1.0f);
    for (size_t done = drawn; done < n;) {
        const size_t chunk = done < n - done ? done : n - done;
        memcpy(x + done, x, chunk * sizeof(float));
        done += chunk;
    }
}

/* A paged cache for --page-size: every sequence holds T keys in ceil(T / page_size) pages, the
 * pool's pages handed out in a seeded shuffled order (as an allocator that has run a while would),
 * so consecutive pages of a sequence are not neighbours in memory. Returns 0, or -1 when out of
 * memory. */
static int bench_page_index(const Options *o, int T, Rng *rng, BenchInputs *in, AttnProblem *p)
{
    const int per_seq = (T + o->page_size - 1) / o->page_size, pages = o->B * per_seq;
    int64_t table_shape[2] = {o->B, per_seq}, lens_shape[1] = {o->B};
    if (tensor_alloc_poisoned(&in->block_table, 2, table_shape) != 0 ||
        tensor_alloc_poisoned(&in->seq_lens, 1, lens_shape) != 0)
        return -1;
    int32_t *table = (int32_t *)(void *)in->block_table.data, *lens = (int32_t *)(void *)in->seq_lens.data;
    for (int i = 0; i < pages; i++)
        table[i] = i;
    for (int i = pages - 1; i > 0; i--) { /* Fisher-Yates */
        const int j = (int)(rng_next_u64(rng) % (uint64_t)(i + 1)), x = table[i];
        table[i] = table[j], table[j] = x;
    }
    for (int b = 0; b < o->B; b++)
        lens[b] = T;
    p->page_size = o->page_size, p->num_pages = pages, p->max_pages = per_seq;
    p->block_table = table, p->seq_lens = lens;
    return 0;
}

/* Seeded normal inputs: q, dO (B, H, Tq, d) and k, v (B, Hkv, T, d), with Tq = T and Hkv = H
 * unless --Tq / --Hkv say otherwise. With `paged` (--page-size, a stage with the paged feature),
 * k and v are page pools (P, page_size, Hkv, d) holding the same number of keys per sequence. */
static int bench_inputs(const Options *o, int T, int d, int with_dout, int paged, BenchInputs *in, AttnProblem *p)
{
    memset(in, 0, sizeof *in);
    memset(p, 0, sizeof *p);
    const int Tq = o->Tq > 0 ? o->Tq : T, Hkv = o->Hkv > 0 ? o->Hkv : o->H;
    const int64_t pages = paged ? (int64_t)o->B * ((T + o->page_size - 1) / o->page_size) : 0;
    int64_t q_shape[4] = {o->B, o->H, Tq, d}, kv_shape[4] = {o->B, Hkv, T, d};
    int64_t pool_shape[4] = {pages, paged ? o->page_size : 0, Hkv, d};
    Tensor *all[4] = {&in->q, &in->k, &in->v, &in->dout};
    Rng rng;
    rng_seed(&rng, BENCH_SEED + (uint64_t)T * 131u + (uint64_t)d);
    for (int i = 0; i < (with_dout ? 4 : 3); i++) {
        const int64_t *shape = i == 1 || i == 2 ? (paged ? pool_shape : kv_shape) : q_shape;
        if (tensor_alloc_poisoned(all[i], 4, shape) != 0) {
            bench_inputs_free(in);
            return -1;
        }
        bench_fill_normal(&rng, all[i]->data, tensor_numel(all[i]));
    }
    int64_t sinks_shape[1] = {o->H};
    if ((o->sinks && tensor_alloc_poisoned(&in->sinks, 1, sinks_shape) != 0) ||
        (paged && bench_page_index(o, T, &rng, in, p) != 0)) {
        bench_inputs_free(in);
        return -1;
    }
    if (o->sinks) /* learned sink logits ~ N(0, 1) */
        rng_fill_normal(&rng, in->sinks.data, tensor_numel(&in->sinks), 1.0f);
    p->B = o->B, p->Hq = o->H, p->Hkv = Hkv, p->Tq = Tq, p->Tk = T, p->d = d, p->dv = d;
    p->scale = 1.0f / sqrtf((float)d);
    p->causal = o->causal || o->window > 0; /* a window implies causal (DESIGN §3) */
    p->window = o->window, p->sink_tokens = o->sink_tokens;
    p->sinks = o->sinks ? in->sinks.data : NULL;
    p->q = in->q.data, p->k = in->k.data, p->v = in->v.data;
    p->dout = with_dout ? in->dout.data : NULL;
    return 0;
}

static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", *s);
        else
            putchar(*s);
    }
    putchar('"');
}

typedef struct {
    const StageImpl *impl;
    AttnProblem p;
    int mla;        /* an MLA row (stage 09): mp holds the sizes, p is unused */
    MlaProblem mp;
    Direction dir;
    double ms, flops;
    uint64_t read, written;       /* HBM bytes of what was timed (forward + backward for bwd) */
    uint64_t read_bwd, written_bwd; /* of the backward pass alone (bwd rows) */
    size_t extra;                 /* the larger of the passes' extra memory */
    int ranks;                    /* stage 13: the ranks that ran (1 for every other stage) */
    uint64_t link_sent;           /* stage 13: bytes all ranks sent over the ring (both passes) */
    const char *error;
} BenchRow;

/* An MLA row prints the MLA sizes where an attention row has its problem. */
static void bench_print_mla_sizes(const Options *o, const BenchRow *row, int first)
{
    const MlaProblem *p = &row->mp;
    char dev[48];
    if (o->json)
        printf("%s\n  {\"stage\": \"%s\", \"name\": \"%s\", \"variant\": \"%s\", \"device\": \"%s\", "
               "\"direction\": \"fwd\", \"B\": %d, \"Hq\": %d, \"Hkv\": 1, \"Tq\": %d, \"Tk\": %d, \"d\": %d, "
               "\"dv\": %d, \"causal\": %s, \"mla\": {\"D\": %d, \"mq\": %d, \"m\": %d, \"p\": %d}, "
               "\"flops\": %.0f, ",
               first ? "" : ",", row->impl->stage, row->impl->name, row->impl->variant,
               device_name(row->impl->device), p->B, p->H, p->Tq, p->Tk, p->dh, p->dv,
               p->causal ? "true" : "false", p->D, p->mq, p->m, p->p, row->flops);
    else
        printf("%-5s  %-12s  %-3s  %3d  %3d  %3s  %6d  %6d  %4d  ", row->impl->stage,
               impl_label(row->impl, dev, sizeof dev), "mla", p->B, p->H, "-", p->Tq, p->Tk, p->dh);
}

static void bench_print_row(const Options *o, const BenchRow *row, int first)
{
    const AttnProblem *p = &row->p;
    if (row->mla)
        bench_print_mla_sizes(o, row, first);
    else if (o->json)
        printf("%s\n  {\"stage\": \"%s\", \"name\": \"%s\", \"variant\": \"%s\", \"device\": \"%s\", "
               "\"direction\": \"%s\", \"B\": %d, \"Hq\": %d, \"Hkv\": %d, \"Tq\": %d, \"Tk\": %d, \"d\": %d, "
               "\"dv\": %d, \"causal\": %s, \"window\": %d, \"sink_tokens\": %d, \"sinks\": %s, "
               "\"page_size\": %d, \"flops\": %.0f, ",
               first ? "" : ",", row->impl->stage, row->impl->name, row->impl->variant,
               device_name(row->impl->device), row->dir == DIR_BWD ? "bwd" : "fwd", p->B, p->Hq, p->Hkv, p->Tq,
               p->Tk, p->d, p->dv, p->causal ? "true" : "false", p->window, p->sink_tokens,
               o->sinks ? "true" : "false", p->page_size, row->flops);
    if (o->json) {
        if (row->error) {
            printf("\"error\": ");
            json_string(row->error);
            printf("}");
        } else {
            printf("\"time_ms\": %.6g, \"gflops_per_s\": %.6g, \"hbm_read_bytes\": %llu, "
                   "\"hbm_written_bytes\": %llu, \"hbm_read_bytes_bwd_pass\": %llu, "
                   "\"hbm_written_bytes_bwd_pass\": %llu, \"extra_bytes\": %zu, \"ranks\": %d, "
                   "\"link_sent_bytes\": %llu, \"error\": null}",
                   row->ms, row->flops / (row->ms * 1e6), (unsigned long long)row->read,
                   (unsigned long long)row->written, (unsigned long long)row->read_bwd,
                   (unsigned long long)row->written_bwd, row->extra, row->ranks > 0 ? row->ranks : 1,
                   (unsigned long long)row->link_sent);
        }
        return;
    }
    char dev[48], r[32], w[32], e[32];
    if (!row->mla)
        printf("%-5s  %-12s  %-3s  %3d  %3d  %3d  %6d  %6d  %4d  ", row->impl->stage,
               impl_label(row->impl, dev, sizeof dev), row->dir == DIR_BWD ? "bwd" : "fwd", p->B, p->Hq,
               p->Hkv, p->Tq, p->Tk, p->d);
    if (row->error) {
        printf("%s\n", row->error);
        return;
    }
    double rate = row->flops / (row->ms * 1e6);
    if (row->impl->device == DEVICE_CUDA)
        rate /= 1000.0;
    printf("%10.3f  %9.2f  %9s  %9s  %9s\n", row->ms, rate, human_bytes((double)row->read, r, sizeof r),
           human_bytes((double)row->written, w, sizeof w), human_bytes((double)row->extra, e, sizeof e));
}

/* Counting run + timed run of one (implementation, T, d). Returns the row's status. */
static int bench_one(const Options *o, const StageImpl *impl, int T, int d, BenchRow *row, FlError *err)
{
    memset(row, 0, sizeof *row);
    row->impl = impl;
    row->dir = o->direction == DIR_BWD ? DIR_BWD : DIR_FWD;
    BenchInputs in;
    const int paged = o->page_size > 0 && (impl->features & FEAT_PAGED);
    if (bench_inputs(o, T, d, row->dir == DIR_BWD, paged, &in, &row->p) != 0)
        return fl_fail(err, FL_BAD_INPUT, "out of memory for inputs of T=%d d=%d", T, d);
    row->flops = attention_flops(&row->p, row->dir);
    Outputs x;
    RunStats stats;
    RunCtx ctx = run_ctx(o);
    RankCounter ranks[64];                       /* stage 13's link bytes (--ranks is at most 64) */
    memset(ranks, 0, sizeof ranks);
    ctx.rank_counters = ctx.ranks > 0 ? ranks : NULL;
    int rc = outputs_alloc(&row->p, &x, err);
    if (rc == FL_OK)
        rc = runner_run(impl, row->dir, &row->p, &x.t, &ctx, &stats, err);
    for (int r = 0; r < ctx.ranks && r < 64; r++)
        row->link_sent += ranks[r].link_sent;
    row->ranks = ranks[0].hbm.bytes_read > 0 ? ctx.ranks : 1; /* the stage counted per rank: a ring */
    ctx.rank_counters = NULL;
    outputs_free(&x);
    if (rc == FL_OK)
        rc = runner_time(impl, row->dir, &row->p, &ctx, 1, o->reps, &row->ms, err);
    if (rc == FL_OK) { /* a bwd row counts what it times: forward + backward */
        row->read = stats.fwd.bytes_read + stats.bwd.bytes_read;
        row->written = stats.fwd.bytes_written + stats.bwd.bytes_written;
        row->extra = stats.extra_bytes_fwd > stats.extra_bytes_bwd ? stats.extra_bytes_fwd : stats.extra_bytes_bwd;
        row->read_bwd = stats.bwd.bytes_read;
        row->written_bwd = stats.bwd.bytes_written;
    }
    bench_inputs_free(&in);
    row->p.q = row->p.k = row->p.v = row->p.dout = row->p.sinks = NULL;
    row->p.block_table = row->p.seq_lens = NULL;
    return rc;
}

/* Seeded MLA inputs (stage 09): x, ckv, kpe ~ N(0, 1), each weight ~ N(0, 1/fan-in), with
 * B, H, Tq (default T: prefill), Tk = T, dh = dv = d and m, p, D, mq from --latent, --rope-dim,
 * --model-dim, --q-rank (default DeepSeek-V2's 512, 64, 5120, 1536). */
static int bench_mla_inputs(const Options *o, int T, int d, Tensor in[MLA_INPUT_COUNT], MlaProblem *p)
{
    memset(p, 0, sizeof *p);
    p->B = o->B, p->H = o->H, p->Tq = o->Tq > 0 ? o->Tq : T, p->Tk = T, p->dh = p->dv = d;
    p->m = o->latent ? o->latent : 512, p->p = o->rope_dim ? o->rope_dim : 64;
    p->D = o->model_dim ? o->model_dim : 5120, p->mq = o->q_rank ? o->q_rank : 1536;
    p->causal = o->causal, p->rope_theta = 10000.0f;
    p->scale = 1.0f / sqrtf((float)(p->dh + p->p));
    const int fan_in[MLA_INPUT_COUNT] = {1, 1, 1, p->D, p->mq, p->mq, p->m, p->m, p->H * p->dv};
    Rng rng;
    rng_seed(&rng, BENCH_SEED + (uint64_t)T * 131u + (uint64_t)d);
    for (int id = 0; id < MLA_INPUT_COUNT; id++) {
        int64_t shape[4];
        int ndim = mla_shape(p, id, shape);
        if (tensor_alloc_poisoned(&in[id], ndim, shape) != 0) {
            for (int j = 0; j < id; j++)
                tensor_free(&in[j]);
            return -1;
        }
        rng_fill_normal(&rng, in[id].data, tensor_numel(&in[id]), 1.0f / sqrtf((float)fan_in[id]));
        p->in[id] = in[id].data;
    }
    return 0;
}

/* Counting run + timed run of one MLA implementation (stage 09). */
static int bench_mla_one(const Options *o, const StageImpl *impl, int T, int d, BenchRow *row, FlError *err)
{
    memset(row, 0, sizeof *row);
    row->impl = impl, row->mla = 1, row->dir = DIR_FWD;
    Tensor in[MLA_INPUT_COUNT];
    memset(in, 0, sizeof in);
    if (bench_mla_inputs(o, T, d, in, &row->mp) != 0)
        return fl_fail(err, FL_BAD_INPUT, "out of memory for MLA inputs of T=%d d=%d", T, d);
    row->flops = mla_flops(&row->mp);
    Tensor y;
    RunStats stats;
    RunCtx ctx = run_ctx(o);
    int rc = row->mp.Tq > row->mp.Tk ? fl_fail(err, FL_BAD_INPUT, "--Tq %d > --T %d: the cache holds the new tokens",
                                               row->mp.Tq, row->mp.Tk)
                                     : mla_y_alloc(&row->mp, &y, err);
    if (rc == FL_OK) {
        rc = runner_run_mla(impl, &row->mp, y.data, &ctx, &stats, err);
        tensor_free(&y);
    }
    if (rc == FL_OK)
        rc = runner_time_mla(impl, &row->mp, &ctx, 1, o->reps, &row->ms, err);
    if (rc == FL_OK) {
        row->read = stats.fwd.bytes_read, row->written = stats.fwd.bytes_written;
        row->extra = stats.extra_bytes_fwd;
    }
    for (int id = 0; id < MLA_INPUT_COUNT; id++) {
        tensor_free(&in[id]);
        row->mp.in[id] = NULL;
    }
    return rc;
}

/* The implementations to bench: every attention one on the device, or those of the --stages list
 * (stage 09, MLA, only when named). */
static int bench_select(const Options *o, const StageImpl **chosen, int *count)
{
    const StageImpl *const *all = stage_registry();
    *count = 0;
    char buf[512];
    if (o->stages && strlen(o->stages) >= sizeof buf)
        return usage_error("bench", "--stages list too long: '%s'", o->stages);
    snprintf(buf, sizeof buf, "%s", o->stages ? o->stages : "");
    char *save = NULL;
    char *tok = o->stages ? strtok_r(buf, ",", &save) : NULL;
    do {
        const StageImpl *want = tok ? stage_find(tok, o->device, NULL) : NULL;
        if (tok && !want) {
            fprintf(stderr, "flashlab bench: no stage '%s' on %s in this build (try 'flashlab list')\n", tok,
                    device_name(o->device));
            return FL_BAD_INPUT;
        }
        for (int i = 0; all[i] && *count < 128; i++)
            if (all[i]->device == o->device && (want ? !strcmp(all[i]->stage, want->stage) : !all[i]->mla_forward) &&
                (!o->variant || !strcmp(all[i]->variant, o->variant)))
                chosen[(*count)++] = all[i];
    } while (tok && (tok = strtok_r(NULL, ",", &save)) != NULL);
    return FL_OK;
}

static int cmd_bench(Options *o)
{
    if (o->npositional > 0)
        return usage_error("bench", "unexpected argument '%s'", o->positional[0]);
    if (o->device == DEVICE_CUDA && !cuda_device_available()) {
        printf("no CUDA device: skipped (cuda: %s)\n", cuda_device_description());
        return FL_NO_DEVICE;
    }
    int cuda = o->device == DEVICE_CUDA;
    static const int cpu_T[] = {512, 1024, 2048, 4096}, cuda_T[] = {1024, 4096, 16384}, cuda_d[] = {64, 128};
    if (o->T.count == 0)
        for (int i = 0; i < (cuda ? 3 : 4); i++)
            o->T.values[o->T.count++] = cuda ? cuda_T[i] : cpu_T[i];
    if (o->d.count == 0)
        for (int i = 0; i < (cuda ? 2 : 1); i++)
            o->d.values[o->d.count++] = cuda_d[i];
    if (o->B == 0)
        o->B = cuda ? 4 : 1;
    if (o->H == 0)
        o->H = cuda ? 16 : 8;
    if (o->reps == 0)
        o->reps = cuda ? 20 : 3;
    if (o->Hkv > 0 && o->H % o->Hkv != 0) {
        char h[32];
        snprintf(h, sizeof h, "%d", o->H);
        return usage_error("bench", "--H %s is not a multiple of --Hkv", h);
    }
    const StageImpl *chosen[128];
    int n;
    int rc = bench_select(o, chosen, &n);
    if (rc != FL_OK)
        return rc;
    if (n == 0) {
        fprintf(stderr, "flashlab bench: no %s stages in this build\n", device_name(o->device));
        return FL_BAD_INPUT;
    }
    int rows = 0, errors = 0;
    for (int s = 0; s < n; s++)
        for (int ti = 0; ti < o->T.count; ti++)
            for (int di = 0; di < o->d.count; di++) {
                BenchRow row;
                FlError err = {{0}};
                if (o->direction == DIR_BWD && !has_backward(chosen[s]))
                    continue; /* forward-only stage: nothing to time backward */
                if (rows == 0 && o->json)
                    printf("[");
                else if (rows == 0)
                    printf("%-5s  %-12s  %-3s  %3s  %3s  %3s  %6s  %6s  %4s  %10s  %9s  %9s  %9s  %9s\n", "stage",
                           "device", "dir", "B", "Hq", "Hkv", "Tq", "Tk", "d", "time ms", cuda ? "TFLOP/s" : "GFLOP/s", "HBM read",
                           "HBM write", "extra mem");
                int status = chosen[s]->mla_forward
                                 ? bench_mla_one(o, chosen[s], o->T.values[ti], o->d.values[di], &row, &err)
                                 : bench_one(o, chosen[s], o->T.values[ti], o->d.values[di], &row, &err);
                if (status != FL_OK) {
                    row.error = err.msg;
                    errors += status != FL_UNSUPPORTED;
                }
                bench_print_row(o, &row, rows == 0);
                rows++;
                fflush(stdout);
            }
    if (o->json && rows > 0)
        printf("\n]\n");
    if (rows == 0) {
        fprintf(stderr, "flashlab bench: nothing to run (no selected stage has a backward pass)\n");
        return FL_BAD_INPUT;
    }
    return errors ? FL_CHECK_FAILED : FL_OK;
}

/* ==== diff ===================================================================================== */

/* Path of a copy of `path` (relative to the source folder) without exercise-marker lines, in a
 * temporary file (empty when it cannot be made); /dev/null stays as it is. */
static int copy_for_diff(const char *path, char *copy, size_t len, FlError *err)
{
    if (!strcmp(path, "/dev/null"))
        return snprintf(copy, len, "%s", path), FL_OK;
    const char *tmp = getenv("TMPDIR");
    snprintf(copy, len, "%s/flashlab-diff-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    int fd = mkstemp(copy);
    if (fd < 0) {
        copy[0] = '\0';
        return fl_fail(err, FL_BAD_INPUT, "cannot create a temporary file (%s)", strerror(errno));
    }
    close(fd);
    char source[4400];
    snprintf(source, sizeof source, "%s/%s", FLASHLAB_SOURCE_DIR, path);
    return stage_copy_without_markers(source, copy, err);
}

/* `diff -u a b` with a and b named by their paths relative to the source folder. Exercise markers
 * (docs/adding_a_stage.md) are no part of the lesson: the files are compared without them. */
static int run_diff(const char *a, const char *b)
{
    char ca[4200] = "", cb[4200] = "";
    FlError err = {{0}};
    int status = -1;
    if (copy_for_diff(a, ca, sizeof ca, &err) == FL_OK && copy_for_diff(b, cb, sizeof cb, &err) == FL_OK) {
        const char *argv[] = {"diff", "-u", "--label", a, "--label", b, ca, cb, NULL};
        status = stage_run_program(argv, NULL, STDOUT_FILENO, &err);
    }
    if (ca[0] && strcmp(ca, "/dev/null"))
        unlink(ca);
    if (cb[0] && strcmp(cb, "/dev/null"))
        unlink(cb);
    if (status < 0 || status > 1) {
        fprintf(stderr, "flashlab diff: %s\n", status < 0 ? err.msg : "the system 'diff' failed");
        return FL_BAD_INPUT;
    }
    if (status == 0)
        printf("(%s and %s are identical)\n", a, b);
    return FL_OK;
}

/* One kind of file of stages fa and fb: paired files (stage_files_partner) are diffed; a file new
 * in fb is shown in full as added lines (it is part of the lesson); a file only in fa is named. */
static int diff_kind(const char *fa, const char *fb, const char *kind)
{
    StageFiles a, b;
    stage_files_list(fa, kind, &a);
    stage_files_list(fb, kind, &b);
    if (a.count == 0 && b.count == 0)
        return FL_OK;
    printf("==== %s ====\n", kind);
    int rc = FL_OK;
    char pa[4400], pb[4400];
    for (int i = 0; i < a.count; i++) {
        const int j = stage_files_partner(&a, i, &b);
        snprintf(pa, sizeof pa, "stages/%s/%s", fa, a.names[i]);
        if (j < 0) {
            printf("only in stages/%s: %s\n", fa, a.names[i]);
            continue;
        }
        snprintf(pb, sizeof pb, "stages/%s/%s", fb, b.names[j]);
        rc = worse(rc, run_diff(pa, pb));
    }
    for (int m = 0; m < b.count; m++) {
        if (stage_files_partner(&b, m, &a) >= 0)
            continue;
        printf("new in stages/%s: %s\n", fb, b.names[m]);
        snprintf(pb, sizeof pb, "stages/%s/%s", fb, b.names[m]);
        rc = worse(rc, run_diff("/dev/null", pb));
    }
    return rc;
}

static int cmd_diff(Options *o)
{
    if (o->npositional != 2)
        return usage_error("diff", "needs two stages, e.g. 'flashlab diff 06 07'%s", "");
    char fa[256], fb[256];
    FlError err = {{0}};
    if (stage_folder_find(o->positional[0], fa, sizeof fa, &err) != FL_OK ||
        stage_folder_find(o->positional[1], fb, sizeof fb, &err) != FL_OK) {
        fprintf(stderr, "flashlab diff: %s\n", err.msg);
        return FL_BAD_INPUT;
    }
    int rc = FL_OK;
    for (int k = 0; stage_file_kinds[k]; k++)
        rc = worse(rc, diff_kind(fa, fb, stage_file_kinds[k]));
    return rc;
}

/* ==== exercise ================================================================================= */

static int cmd_exercise(Options *o)
{
    if (o->npositional != 2)
        return usage_error("exercise", "needs a stage and a folder, e.g. 'flashlab exercise 07 ex07'%s", "");
    FlError err = {{0}};
    int rc = exercise_write(o->positional[0], o->positional[1], &err);
    if (rc != FL_OK)
        fprintf(stderr, "flashlab exercise: %s\n", err.msg);
    return rc;
}

/* ==== help and dispatch ======================================================================= */

typedef struct {
    const char *name;
    int (*run)(Options *);
    const char *usage;
    const char *help;
} Command;

static const Command commands[] = {
    {"list", cmd_list, "flashlab list",
     "Prints one row per registered implementation: stage, name, device, variant, the precision it\n"
     "computes in (float32, or bf16 for stage 12, with the head dims it runs: 'bf16 d=64,128' means\n"
     "d = dv = 64 or 128 only), the features it supports and its one-line lesson; then whether a CUDA\n"
     "device is available.\n"},
    {"check", cmd_check,
     "flashlab check STAGE [CASE_DIR...] [--device cpu|cuda] [--variant V] [--direction fwd|bwd]\n"
     "                     [--sram BYTES] [--block-r N] [--block-c N] [--threads N] [--splits N]\n"
     "                     [--ranks P] [--verbose] [--json]",
     "Runs STAGE (e.g. 3, 03 or 03_tiled) on case folders and compares every output with the case's\n"
     "expected .npy files: |out - ref| <= 1e-4 + 1e-4*|ref| for o and lse, 5e-4 for gradients; NaN/Inf\n"
     "positions must match. Those are the float32 tolerances; stage 12 computes in bf16 (float32\n"
     "accumulation) and is checked at 2^-5 (o, lse) and 2^-4 (gradients), derived in\n"
     "docs/conventions.md. Outputs are poisoned with NaN before each run. Prints a header per case, one\n"
     "line per tensor (max abs error, max rel error, mismatches and the first mismatching indices), then\n"
     "a summary.\n"
     "\n"
     "Cases: the CASE_DIRs given, else every folder of the golden directory ($FLASHLAB_GOLDEN, default\n"
     "golden/cases of the source tree) that holds q.npy and whose features the stage supports (and, for\n"
     "a stage that runs only some head dims, as stage 12 runs d = dv in {64, 128}, whose d and dv it\n"
     "runs; a CASE_DIR it does not run exits 3).\n"
     "Stage 09 (MLA) runs the MLA cases instead (folders with ckv.npy, docs/conventions.md) and compares\n"
     "y.npy with the forward tolerance; the other stages skip MLA cases.\n"
     "Paged decode cases (folders with k_pages.npy, docs/conventions.md) need the paged feature (stage 11);\n"
     "stage 11 also runs every forward attention case on a contiguous cache.\n"
     "Direction: without --direction a case runs forward+backward when it has do.npy and the stage has a\n"
     "backward pass (o, lse, dq, dk, dv and dsinks are compared), else forward only (o, lse; do.npy is\n"
     "ignored). --direction fwd checks the forward pass only; --direction bwd only cases with do.npy.\n"
     "\n"
     "  --device cpu|cuda   device of the implementation (default cpu)\n"
     "  --variant V         a variant of the stage (see 'flashlab list'); default the plain one\n"
     "  --sram BYTES        SRAM size M of the tiled CPU stages (65536, 64K, 1M; default 128K)\n"
     "  --block-r/-c N      tile sizes Br, Bc (default: derived from M and d)\n"
     "  --threads N         CPU worker threads (default: all cores)\n"
     "  --splits N          stage 11: split each sequence's keys into N chunks (default: its heuristic)\n"
     "  --ranks P           stage 13: run the ring over P ranks (CPU threads; with --device cuda one GPU\n"
     "                      each, 77 with fewer GPUs; default 1)\n"
     "  --verbose           case descriptions, HBM counts, and the golden cases skipped\n"
     "  --json              a grade report instead of the text (one JSON object on stdout): the stage's\n"
     "                      precision and tolerances; per case\n"
     "                      its status (pass, fail, error), per tensor max abs / max rel error and the\n"
     "                      mismatch count, HBM bytes read and written beside those of the reference\n"
     "                      (the stage's default variant on the same device), and the time (median of\n"
     "                      3 runs after a warm-up); then checked, passed, failed, skipped\n"
     "\n"
     "Exit: 0 all passed; 1 a tensor failed; 2 bad usage, an unreadable case, a run the stage refused\n"
     "(e.g. tiles that do not fit in --sram), or no case checked at all;\n"
     "3 a named case needs a feature the stage lacks (or --direction bwd on a forward-only stage);\n"
     "77 --device cuda without a CUDA device (prints 'no CUDA device: skipped').\n"},
    {"run", cmd_run,
     "flashlab run STAGE CASE_DIR --out DIR [--device cpu|cuda] [--variant V] [--direction fwd|bwd]\n"
     "                   [--sram BYTES] [--block-r N] [--block-c N] [--threads N] [--splits N] [--ranks P]",
     "Runs STAGE on any case folder (case.json optional, q.npy k.npy v.npy, optional do.npy and\n"
     "sinks.npy; expected files are not needed) and writes float32 o.npy and lse.npy into DIR, plus\n"
     "dq.npy dk.npy dv.npy (and dsinks.npy with sinks.npy) when do.npy is present and the stage has a\n"
     "backward pass (--direction fwd skips it). DIR is created if missing. Everything is computed before\n"
     "any file is written; if a write fails, the files already written are removed. DIR may not be a case\n"
     "folder or lie inside one (hold case.json, q.npy, ckv.npy, ... or sit below a folder that does).\n"
     "An input holding NaN or Inf gets one warning line (file, count, first index) and the outputs that\n"
     "depend on it are NaN; a NaN or Inf output from finite inputs gets one warning line per tensor.\n"
     "An MLA case (x.npy, ckv.npy, kpe.npy and the w_*.npy weights; stage 09 only) writes y.npy.\n"
     "A paged decode case (q.npy, k_pages.npy, v_pages.npy, int32 block_table.npy and seq_lens.npy,\n"
     "optional sinks.npy; stage 11 only) writes o.npy and lse.npy.\n"
     "Exit: 0 ok; 2 bad usage or bad input; 3 the case needs a feature the stage lacks; 77 no CUDA device.\n"},
    {"tour", cmd_tour, "flashlab tour [--device cpu|cuda|all] [--sram BYTES] [--threads N]",
     "Runs every registered implementation, in ladder order, on the golden case golden/cases/tour and\n"
     "prints one table: stage, device (and variant), what was checked (fwd, or fwd+bwd where the stage\n"
     "has a backward pass and the case has do.npy), pass/FAIL (at the tolerance of the stage's\n"
     "precision: float32, or bf16 for stage 12), the max abs error against the golden\n"
     "files, HBM bytes read and written and the extra memory of the forward pass, the median time of 5\n"
     "forward runs (after 1 warm-up, counting off), GFLOP/s (4*B*Hq*Tq*Tk*d), and the lesson.\n"
     "A stage that ran fwd+bwd gets a second line, 'bwd': HBM bytes and extra memory of the backward\n"
     "pass, and the median time and GFLOP/s (3.5x forward FLOPs) of 5 forward + backward runs.\n"
     "Stage 09 (MLA) rows run the golden MLA case " TOUR_MLA_CASE " instead ('mla' in the checked column;\n"
     "GFLOP/s from the MLA step's FLOPs, see bench --help).\n"
     "CUDA rows print 'skipped (no CUDA device)' when there is none. --device picks one device\n"
     "(default all). Exit: 0 all rows passed; 1 a row failed; 2 the tour case cannot be read or no\n"
     "stage ran; 77 --device cuda without a CUDA device.\n"},
    {"bench", cmd_bench,
     "flashlab bench [--device cpu|cuda] [--stages 01,02,03] [--T 512,1024,2048,4096] [--B 1] [--H 8]\n"
     "               [--Hkv N] [--Tq N] [--d 64] [--causal] [--window W] [--sink-tokens S] [--sinks]\n"
     "               [--direction fwd|bwd] [--variant V] [--reps N] [--sram BYTES] [--block-r N]\n"
     "               [--block-c N] [--threads N] [--json] [--page-size N] [--splits N] [--ranks P]\n"
     "               [--latent M] [--rope-dim P] [--model-dim D] [--q-rank MQ]     (stage 09)",
     "Times the stages on seeded random problems: q (B, H, Tq, d), k and v (B, Hkv, T, d), d = dv.\n"
     "By default Tq = T and Hkv = H (self-attention); --Tq 1 --Hkv 8 --H 32 is a GQA decode step\n"
     "(stages without the gqa feature then report the row as unsupported). --window W (implies\n"
     "--causal), --sink-tokens S and --sinks (learned sink logits, seeded N(0, 1)) ask for stage 10.\n"
     "--variant V benches only that variant of each stage ('' = the default one).\n"
     "--page-size N gives the stages with the paged feature (11) a paged KV cache instead: every sequence's\n"
     "T keys in pages of N slots, pages in a seeded shuffled order (the other stages keep contiguous K/V);\n"
     "--splits N fixes stage 11's split count; --ranks P runs stage 13's ring over P ranks. Inputs above\n"
     "2^24 elements repeat their first 2^24 values.\n"
     "For each (stage implementation, T, d): one counting run (HBM bytes, extra memory) and a timed\n"
     "run: the median of --reps runs after one warm-up, counting off. Prints time in ms, GFLOP/s\n"
     "(TFLOP/s on cuda), HBM bytes read and written, and extra memory, one row per run as it finishes;\n"
     "--json prints a JSON array instead (raw numbers, for notebooks and scripts; a stage 13 row also\n"
     "gives its ranks and link_sent_bytes, the bytes all ranks sent over the ring in what was counted).\n"
     "--direction bwd times forward + backward (each timed run: the forward pass, then the backward\n"
     "pass) of the stages that have a backward; its HBM bytes are those of both passes (JSON also\n"
     "gives the backward pass alone: hbm_read_bytes_bwd_pass, hbm_written_bytes_bwd_pass) and its\n"
     "extra memory the larger of the two passes'.\n"
     "FLOPs: 4*B*H*Tq*T*d forward, halved with --causal when Tq = T; with --window, 4*B*H*d per\n"
     "query-key pair the window (and sink tokens) keep; forward + backward 3.5x forward.\n"
     "Stage 09 (MLA) rows time one MLA step on seeded inputs: x (B, Tq, D), the latent cache ckv (B, T, m)\n"
     "and kpe (B, T, p), the weights (each N(0, 1/fan-in)); H heads, dh = dv = d, Tq = T unless --Tq;\n"
     "m, p, D, mq from --latent, --rope-dim (even), --model-dim, --q-rank, default DeepSeek-V2's 512, 64,\n"
     "5120, 1536. Their FLOPs are the absorbed form's, for both variants: 2 per multiply-add of the\n"
     "query and output projections and the W_uk / W_uv folds, plus 2 H (2m + p) per query-key pair.\n"
     "Defaults: cpu: every CPU implementation, T = 512,1024,2048,4096, B = 1, H = 8, d = 64, reps 3.\n"
     "          cuda: every CUDA implementation, T = 1024,4096,16384, B = 4, H = 16, d = 64,128, reps 20.\n"
     "          (Stage 09 runs only when --stages names it: its problem is not an attention one.)\n"
     "Exit: 0 ok; 1 a run failed (its row shows why; e.g. out of memory); 2 bad usage; 77 no CUDA\n"
     "device for --device cuda.\n"},
    {"diff", cmd_diff, "flashlab diff A B",
     "The lesson diff: for each kind of source (.h, .c, .cu, README.md) found in either stage folder,\n"
     "runs the system 'diff -u' of stage A's file against stage B's (paths relative to the source tree).\n"
     "A file new in B is shown in full as added lines (diff against /dev/null); a file only in A is\n"
     "named. A and B are stage numbers or folder names (6, 06, 06_backward).\n"
     "Exit: 0 (differences are the point); 2 a stage folder does not exist or diff cannot run.\n"},
    {"exercise", cmd_exercise, "flashlab exercise STAGE DIR",
     "Writes a student copy of STAGE into DIR (a new or empty folder): the stage's .c, .cu and .h files\n"
     "with the lesson taken out as numbered TODO blocks, '// TODO(exercise K/N, stage NN): ...' to\n"
     "'// END TODO(exercise K/N)'; a README.md with the task and the commands; a CMakeLists.txt.\n"
     "A file that continues a file of the stage it was copied from (the stage's README names it in\n"
     "'flashlab diff MM NN') gets one block per change of that diff, holding stage MM's lines, live,\n"
     "so the copy compiles; changes to comments only and the StageImpl registration keep stage NN's\n"
     "lines. A file with exercise markers ('exercise: begin' ... 'exercise: end', docs/adding_a_stage.md)\n"
     "gets one block per marked region instead, with the marker's stub as its only code; in a stage\n"
     "with markers, its files without them are copied as they are, and so is a new file with no\n"
     "earlier partner. The copy compiles and fails the stage's checks until the TODOs are done.\n"
     "Build it as variant 'student' of its stage: cmake --preset default -DFLASHLAB_STUDENT_DIR=DIR; then\n"
     "'ctest -R stageNN' runs its tests too and 'flashlab check NN --variant student' checks it (run by\n"
     "build/flashlab_student, which flashlab hands every --variant student* request to).\n"
     "Files are written to a temporary folder beside DIR and renamed to DIR at the end: a failure\n"
     "leaves nothing behind. docs/teaching.md describes the whole course set-up.\n"
     "Exit: 0 ok; 2 bad usage, an unknown stage, DIR exists and is not empty, or the stage gives no TODO.\n"},
};
#define NCOMMANDS (int)(sizeof commands / sizeof commands[0])

static void print_main_help(FILE *f)
{
    fprintf(f,
            "flashlab — attention from naive to FlashAttention-2, checked against golden files, with\n"
            "HBM-traffic counters.\n\nUsage:\n");
    for (int i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %s\n", commands[i].usage);
    fprintf(f,
            "\n'flashlab CMD --help' describes one command.\n"
            "Exit codes: 0 ok; 1 a check failed; 2 bad usage or bad input; 3 the stage lacks a feature the\n"
            "case asks for (the message names the stage that adds it); 77 no CUDA device (skipped).\n");
}

int main(int argc, char **argv)
{
    int forwarded = exercise_forward_to_student_build(argc, argv);
    if (forwarded >= 0)
        return forwarded;
    if (argc < 2) {
        print_main_help(stderr);
        return FL_BAD_INPUT;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        print_main_help(stdout);
        return FL_OK;
    }
    for (int i = 0; i < NCOMMANDS; i++) {
        if (strcmp(argv[1], commands[i].name) != 0)
            continue;
        Options o;
        memset(&o, 0, sizeof o);
        o.command = commands[i].name;
        o.device = DEVICE_CPU;
        o.device_all = !strcmp(o.command, "tour");
        o.direction = DIRECTION_BOTH;
        int rc = parse_options(&o, argc - 2, argv + 2);
        if (rc < 0) {
            printf("Usage: %s\n\n%s", commands[i].usage, commands[i].help);
            return FL_OK;
        }
        if (rc != FL_OK)
            return rc;
        return commands[i].run(&o);
    }
    fprintf(stderr, "flashlab: unknown command '%s' (see 'flashlab --help')\n", argv[1]);
    return FL_BAD_INPUT;
}
