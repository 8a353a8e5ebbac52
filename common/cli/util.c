/* util.c — small helpers the flashlab commands share (cli.h). */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "timer.h"
#include "stage_files.h"

int usage_error(const char *command, const char *fmt, const char *what)
{
    fprintf(stderr, "flashlab%s%s: ", command ? " " : "", command ? command : "");
    fprintf(stderr, fmt, what);
    fprintf(stderr, " (see 'flashlab %s%s--help')\n", command ? command : "", command ? " " : "");
    return FL_BAD_INPUT;
}

void json_string(const char *s)
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

const char *feature_list(const StageImpl *impl, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "forward");
    for (unsigned bit = 0; bit < FEAT_COUNT && used < len; bit++)
        if (impl->features & (1u << bit))
            used += (size_t)snprintf(buf + used, len - used, ",%s", attn_feature_name(1u << bit));
    const CaseKind *kind = kind_of_stage(impl);
    if (kind->marker && used < len) /* a stage of a kind other than the default: its name */
        snprintf(buf + used, len - used, ",%s", kind->name);
    return buf;
}

const char *precision_label(const StageImpl *impl, char *buf, size_t len)
{
    const char *name = impl->precision == PRECISION_BF16 ? "bf16" : "float32";
    char dims[48];
    stage_head_dims_text(impl, ",", dims, sizeof dims);
    snprintf(buf, len, dims[0] ? "%s d=%s" : "%s", name, dims);
    return buf;
}

const char *golden_dir(void)
{
    const char *env = getenv("FLASHLAB_GOLDEN");
    return env && env[0] ? env : FLASHLAB_SOURCE_DIR "/golden/cases";
}

/* "12.3 MB": decimal units, as memory bandwidth is quoted. */
const char *human_bytes(double bytes, char *buf, size_t len)
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

const char *impl_label(const StageImpl *impl, char *buf, size_t len)
{
    snprintf(buf, len, "%s%s%s", device_name(impl->device), impl->variant[0] ? " " : "", impl->variant);
    return buf;
}

int has_backward(const StageImpl *impl)
{
    return impl->backward && (impl->features & FEAT_BACKWARD);
}

/* Finds the implementation, or explains on stderr why there is none (returns 2) or why it cannot
 * run here (77). */
int resolve_impl(const Options *o, const char *stage, const StageImpl **impl)
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

RunCtx run_ctx(const Options *o) { return runner_ctx_defaults(&o->ctx); }

/* A stage before 06 has not reached the backward pass yet; a later one (11, the decoding step) is
 * forward only by design. */
const char *no_backward_reason(const StageImpl *impl)
{
    return strcmp(impl->stage, attn_feature_added_by(FEAT_BACKWARD)) < 0 ? "stage 06 adds it"
                                                                          : "it is a forward-only stage";
}

/* Exit code of several results: bad input beats unsupported beats no device beats failure. */
int worse(int a, int b)
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
int list_subdirs(const char *dir, char ***names, int *count, FlError *err)
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

void free_names(char **names, int count)
{
    for (int i = 0; i < count; i++)
        free(names[i]);
    free(names);
}

void print_wrapped(int indent, int width, const char *text)
{
    const char *p = text;
    while (*p) {
        int room = width - indent, n = (int)strlen(p);
        if (n > room) { /* break at the last space that fits */
            n = room;
            while (n > 0 && p[n] != ' ')
                n--;
            if (n == 0)
                n = room;
        }
        printf("%*s%.*s\n", indent, "", n, p);
        p += n;
        while (*p == ' ')
            p++;
    }
}

void progress_line(int done, int total, double start_ms, const char *what)
{
    static int shown;
    if (!isatty(STDERR_FILENO))
        return;
    if (done >= total) { /* finished: clear the line */
        if (shown)
            fprintf(stderr, "\r%*s\r", 100, "");
        shown = 0;
        return;
    }
    fprintf(stderr, "\r[%d of %d done, %.0f s] %-60.60s", done, total, (timer_now_ms() - start_ms) / 1000.0, what);
    fflush(stderr);
    shown = 1;
}
