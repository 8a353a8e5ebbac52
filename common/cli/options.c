/* options.c — the options of every flashlab command: which command takes which, and their values
 * checked (a number in range, a byte count, a list). Anything else is one line and exit 2. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

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
    {"--docs", 0, "diff"},
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
        return parse_int(cmd, name, value, 1, 1 << 20, &o->shape.page_size);
    if (!strcmp(name, "--verbose"))
        return o->verbose = 1, FL_OK;
    if (!strcmp(name, "--docs"))
        return o->docs = 1, FL_OK;
    if (!strcmp(name, "--out"))
        return o->out_dir = value, FL_OK;
    if (!strcmp(name, "--stages"))
        return o->stages = value, FL_OK;
    if (!strcmp(name, "--T"))
        return parse_int_list(cmd, name, value, 1 << 24, &o->T);
    if (!strcmp(name, "--d"))
        return parse_int_list(cmd, name, value, 4096, &o->d);
    if (!strcmp(name, "--B"))
        return parse_int(cmd, name, value, 1, 1 << 16, &o->shape.B);
    if (!strcmp(name, "--H"))
        return parse_int(cmd, name, value, 1, 1 << 16, &o->shape.H);
    if (!strcmp(name, "--Hkv"))
        return parse_int(cmd, name, value, 1, 1 << 16, &o->shape.Hkv);
    if (!strcmp(name, "--Tq"))
        return parse_int(cmd, name, value, 1, 1 << 24, &o->shape.Tq);
    if (!strcmp(name, "--causal"))
        return o->shape.causal = 1, FL_OK;
    if (!strcmp(name, "--window"))
        return parse_int(cmd, name, value, 0, 1 << 24, &o->shape.window);
    if (!strcmp(name, "--sink-tokens"))
        return parse_int(cmd, name, value, 0, 1 << 24, &o->shape.sink_tokens);
    if (!strcmp(name, "--sinks"))
        return o->shape.sinks = 1, FL_OK;
    if (!strcmp(name, "--reps"))
        return parse_int(cmd, name, value, 1, 100000, &o->reps);
    if (!strcmp(name, "--json"))
        return o->json = 1, FL_OK;
    if (!strcmp(name, "--latent"))
        return parse_int(cmd, name, value, 1, 1 << 16, &o->shape.latent);
    if (!strcmp(name, "--rope-dim")) {
        int rc = parse_int(cmd, name, value, 2, 1 << 16, &o->shape.rope_dim);
        return rc == FL_OK && o->shape.rope_dim % 2 ? usage_error(cmd, "--rope-dim must be even (rotated pairs), got %s",
                                                            value)
                                              : rc;
    }
    if (!strcmp(name, "--model-dim"))
        return parse_int(cmd, name, value, 1, 1 << 20, &o->shape.model_dim);
    if (!strcmp(name, "--q-rank"))
        return parse_int(cmd, name, value, 1, 1 << 20, &o->shape.q_rank);
    return usage_error(cmd, "unknown option '%s'", name);
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
