/* options.c — the options of every flashlab command: which command takes which, and their values
 * checked (a number in range, a byte count, a list). Anything else is one line and exit 2. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* How an option's value is read. */
typedef enum {
    OPT_FLAG,      /* no value: sets an int to 1 */
    OPT_INT,       /* an integer in [min, max] */
    OPT_BYTES,     /* a byte count: 65536, 64K, 1M */
    OPT_INT_LIST,  /* "512,1024": each in [1, max] */
    OPT_STRING,    /* kept as given */
    OPT_SPECIAL    /* --device, --direction: apply_special */
} OptionKind;

typedef struct {
    const char *name;
    OptionKind kind;
    size_t offset;        /* where in Options the value goes */
    long min, max;
    const char *commands; /* space-separated list of the subcommands that accept it */
} OptionSpec;

#define AT(field) offsetof(Options, field)
static const OptionSpec option_specs[] = {
    {"--device", OPT_SPECIAL, 0, 0, 0, "check run tour bench"},
    {"--variant", OPT_STRING, AT(variant), 0, 0, "check run bench"},
    {"--direction", OPT_SPECIAL, 0, 0, 0, "check run bench"},
    {"--sram", OPT_BYTES, AT(ctx.sram_bytes), 0, 0, "check run tour bench"},
    {"--block-r", OPT_INT, AT(ctx.block_r), 1, 1 << 20, "check run bench"},
    {"--block-c", OPT_INT, AT(ctx.block_c), 1, 1 << 20, "check run bench"},
    {"--threads", OPT_INT, AT(ctx.threads), 1, 4096, "check run tour bench"},
    {"--splits", OPT_INT, AT(ctx.splits), 1, 1024, "check run bench"},
    {"--blocks", OPT_INT, AT(ctx.blocks), 1, 1 << 20, "check run bench"},
    {"--ranks", OPT_INT, AT(ctx.ranks), 1, 64, "check run bench"},
    {"--page-size", OPT_INT, AT(shape.page_size), 1, 1 << 20, "bench"},
    {"--verbose", OPT_FLAG, AT(verbose), 0, 0, "check"},
    {"--no-io-check", OPT_FLAG, AT(no_io_check), 0, 0, "check"},
    {"--docs", OPT_FLAG, AT(docs), 0, 0, "diff"},
    {"--out", OPT_STRING, AT(out_dir), 0, 0, "run"},
    {"--stages", OPT_STRING, AT(stages), 0, 0, "bench"},
    {"--T", OPT_INT_LIST, AT(T), 1, 1 << 24, "bench"},
    {"--B", OPT_INT, AT(shape.B), 1, 1 << 16, "bench"},
    {"--H", OPT_INT, AT(shape.H), 1, 1 << 16, "bench"},
    {"--Hkv", OPT_INT, AT(shape.Hkv), 1, 1 << 16, "bench"},
    {"--Tq", OPT_INT, AT(shape.Tq), 1, 1 << 24, "bench"},
    {"--d", OPT_INT_LIST, AT(d), 1, 4096, "bench"},
    {"--causal", OPT_FLAG, AT(shape.causal), 0, 0, "bench"},
    {"--window", OPT_INT, AT(shape.window), 0, 1 << 24, "bench"},
    {"--sink-tokens", OPT_INT, AT(shape.sink_tokens), 0, 1 << 24, "bench"},
    {"--sinks", OPT_FLAG, AT(shape.sinks), 0, 0, "bench"},
    {"--reps", OPT_INT, AT(reps), 1, 100000, "bench"},
    {"--queued", OPT_FLAG, AT(queued), 0, 0, "bench"},
    {"--json", OPT_FLAG, AT(json), 0, 0, "check bench"},
};
#undef AT

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

/* The options whose value is more than a number: --device, --direction. */
static int apply_special(Options *o, const char *name, const char *value)
{
    const char *cmd = o->command;
    if (!strcmp(name, "--device")) {
        if (!strcmp(value, "cpu") || !strcmp(value, "cuda"))
            o->device = !strcmp(value, "cpu") ? DEVICE_CPU : DEVICE_CUDA, o->device_all = 0;
        else if (!strcmp(value, "all") && !strcmp(cmd, "tour"))
            o->device_all = 1;
        else
            return usage_error(cmd, "unknown device '%s'", value);
        return FL_OK;
    }
    if (!strcmp(name, "--direction")) {
        if (strcmp(value, "fwd") != 0 && strcmp(value, "bwd") != 0)
            return usage_error(cmd, "--direction is fwd or bwd, got '%s'", value);
        o->direction = !strcmp(value, "fwd") ? DIR_FWD : DIR_BWD;
        return FL_OK;
    }
    return usage_error(cmd, "unknown option '%s'", name);
}

/* A bench option of a kind's own sizes (kind.h KindOption): an integer in range, even where the
 * kind says so, kept by name for the kind's bench_case. */
static int apply_kind_option(Options *o, const KindOption *opt, const char *value)
{
    BenchShape *s = &o->shape;
    int v, at = 0;
    int rc = parse_int(o->command, opt->name, value, opt->min, opt->max, &v);
    if (rc != FL_OK)
        return rc;
    if (opt->even && v % 2) {
        char what[128];
        snprintf(what, sizeof what, "%s must be even (%s), got %s", opt->name, opt->even, value);
        return usage_error(o->command, "%s", what);
    }
    while (at < s->nkind_sizes && strcmp(s->kind_sizes[at].name, opt->name) != 0)
        at++;
    if (at == BENCH_MAX_KIND_SIZES) /* every kind option once: more than there are slots */
        return usage_error(o->command, "too many size options for the case kinds (%s)", opt->name);
    s->kind_sizes[at].name = opt->name, s->kind_sizes[at].value = v;
    if (at == s->nkind_sizes)
        s->nkind_sizes++;
    return FL_OK;
}

static int apply_option(Options *o, const OptionSpec *spec, const char *value)
{
    char *field = (char *)o + spec->offset;
    switch (spec->kind) {
    case OPT_FLAG:
        *(int *)(void *)field = 1;
        return FL_OK;
    case OPT_INT:
        return parse_int(o->command, spec->name, value, spec->min, spec->max, (int *)(void *)field);
    case OPT_BYTES:
        return parse_bytes(o->command, spec->name, value, (size_t *)(void *)field);
    case OPT_INT_LIST:
        return parse_int_list(o->command, spec->name, value, spec->max, (IntList *)(void *)field);
    case OPT_STRING:
        *(const char **)(void *)field = value;
        return FL_OK;
    default:
        return apply_special(o, spec->name, value);
    }
}

/* Parses argv (after the subcommand). Returns FL_OK, FL_BAD_INPUT, or -1 when help was asked for. */
int parse_options(Options *o, int argc, char **argv)
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
        const KindOption *kind_opt = !spec && !strcmp(o->command, "bench") ? kind_option(name) : NULL;
        if (!spec && !kind_opt)
            return usage_error(o->command, "unknown option '%s'", name);
        const char *value = NULL;
        if (kind_opt || spec->kind != OPT_FLAG) {
            if (eq)
                value = eq + 1;
            else if (i + 1 < argc)
                value = argv[++i];
            else
                return usage_error(o->command, "option '%s' needs a value", name);
        } else if (eq) {
            return usage_error(o->command, "option '%s' takes no value", name);
        }
        int rc = kind_opt ? apply_kind_option(o, kind_opt, value) : apply_option(o, spec, value);
        if (rc != FL_OK)
            return rc;
    }
    return FL_OK;
}
