/* case.c — loading a case folder: the kind it is (kind.h), and what every kind's loader shares
 * (case.json, the tensors and their shape checks, the non-finite warning) and the --out rule. The
 * attention kind's own folders are read by case_attention.c, the MLA kind's by kind_mla.c.
 *
 * case.json is optional: a missing file means every option takes its default (not causal,
 * window 0, sink_tokens 0, scale 1/sqrt(d), empty description). When present it must be a flat
 * JSON object with only the keys a kind allows; anything else is refused, naming case.json and the
 * key. A folder holding k_pages.npy is a paged decode case (stage 11). */
#include "case.h"
#include "kind.h"
#include "files.h"
#include "npy.h"
#include "text.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>

enum { PATH_LEN = 4096 + 64 };

/* Copies src into dst of size bytes, cutting it short if needed. */
static void copy_string(char *dst, size_t size, const char *src)
{
    size_t n = strlen(src);
    if (n >= size)
        n = size - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static void join_path(char *out, const char *dir, const char *file)
{
    snprintf(out, PATH_LEN, "%s/%s", dir, file);
}

void case_path(const Case *c, const char *file, char *out, size_t len)
{
    snprintf(out, len, "%s/%s", c->dir, file);
}

/* ---- case.json ------------------------------------------------------------------------- */

#define CASE_JSON_MAX_BYTES ((size_t)16 << 20) /* a case.json is a few lines; 16 MB is plenty */

/* A JSON number that is a whole number in [0, INT_MAX]. */

/* "key 'window' must be an integer >= 0, got -1" style message for a bad option value. */
static int bad_option(const char *path, const cJSON *item, const char *rule, FlError *err)
{
    char *text = cJSON_PrintUnformatted(item);
    int rc = fl_fail(err, FL_BAD_INPUT, "%s: key '%s' must be %s, got %.60s", path, item->string,
                     rule, text ? text : "?");
    cJSON_free(text);
    return rc;
}

/* The option kinds the keys share: a bool, a finite float > 0, a whole number >= min, the
 * description string. */
int case_option_bool(const char *path, const struct cJSON *item, int *out, FlError *err)
{
    if (!cJSON_IsBool(item))
        return bad_option(path, item, "true or false", err);
    *out = cJSON_IsTrue(item);
    return FL_OK;
}

int case_option_positive(const char *path, const struct cJSON *item, float *out, FlError *err)
{
    float x = cJSON_IsNumber(item) ? (float)item->valuedouble : 0.0f;
    if (!isfinite(x) || x <= 0.0f) /* also refuses what float32 cannot hold */
        return bad_option(path, item, "a finite number > 0", err);
    *out = x;
    return FL_OK;
}

int case_option_int(const char *path, const struct cJSON *item, int min, const char *rule, int *out,
                    FlError *err)
{
    const double v = cJSON_IsNumber(item) ? item->valuedouble : -1.0;
    if (!cJSON_IsNumber(item) || !isfinite(v) || v < min || v > INT_MAX || v != floor(v))
        return bad_option(path, item, rule, err);
    *out = (int)v;
    return FL_OK;
}

int case_option_description(Case *c, const char *path, const struct cJSON *item, FlError *err)
{
    if (!cJSON_IsString(item))
        return bad_option(path, item, "a string", err);
    copy_string(c->description, sizeof c->description, item->valuestring);
    return FL_OK;
}

int case_option_unknown(const char *path, const char *key, const char *kind_words, const char *allowed,
                        FlError *err)
{
    return fl_fail(err, FL_BAD_INPUT, "%s: unknown key '%s'%s (allowed: %s)", path, key, kind_words, allowed);
}

int case_read_options(Case *c, CaseOptionFn apply, FlError *err)
{
    char path[PATH_LEN];
    join_path(path, c->dir, "case.json");
    int exists = fl_path_exists(path, err);
    if (exists <= 0)
        return exists < 0 ? FL_BAD_INPUT : FL_OK; /* absent: defaults */

    Buf text = {0};
    if (read_text(path, &text, CASE_JSON_MAX_BYTES, err) != FL_OK) {
        buf_free(&text);
        return FL_BAD_INPUT;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text.text, &end, 1);
    if (!root) {
        size_t offset = end ? (size_t)(end - text.text) : 0;
        buf_free(&text);
        return fl_fail(err, FL_BAD_INPUT, "%s: invalid JSON near byte %zu", path, offset);
    }
    buf_free(&text);

    int rc = FL_OK;
    if (!cJSON_IsObject(root))
        rc = fl_fail(err, FL_BAD_INPUT, "%s: must be a JSON object such as {\"causal\": true}",
                     path);
    for (const cJSON *item = root->child; !rc && item && cJSON_IsObject(root); item = item->next) {
        for (const cJSON *before = root->child; before != item; before = before->next)
            if (strcmp(before->string, item->string) == 0)
                rc = fl_fail(err, FL_BAD_INPUT, "%s: key '%s' appears twice", path, item->string);
        if (!rc)
            rc = apply(c, path, item, err);
    }
    cJSON_Delete(root);
    return rc;
}

/* ---- tensors --------------------------------------------------------------------------- */

int case_load_tensor(const Case *c, const char *file, int required, Tensor *t, FlError *err)
{
    char path[PATH_LEN];
    join_path(path, c->dir, file);
    if (!required) {
        int exists = fl_path_exists(path, err);
        if (exists <= 0)
            return exists < 0 ? FL_BAD_INPUT : FL_OK;
    }
    return npy_read(path, t, err);
}

/* Checks that t (file) has exactly ndim dimensions, each in [1, INT_MAX]. */
int case_check_ndim(const Case *c, const char *file, const Tensor *t, int ndim,
                       const char *names, FlError *err)
{
    char shape[128];
    tensor_shape_str(t, shape, sizeof shape);
    if (t->ndim != ndim)
        return fl_fail(err, FL_BAD_INPUT, "%s/%s: expected %d dimensions %s, got shape %s", c->dir,
                       file, ndim, names, shape);
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] < 1 || t->shape[i] > INT_MAX)
            return fl_fail(err, FL_BAD_INPUT, "%s/%s: every size of %s must be >= 1, got shape %s",
                           c->dir, file, names, shape);
    return FL_OK;
}

/* a's dimension da must equal b's dimension db (what names the size, e.g. "B"). */
int case_check_shape(const Case *c, const char *file, const Tensor *t, const int64_t *shape,
                          int ndim, FlError *err)
{
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = t->shape[i] == shape[i];
    if (same)
        return FL_OK;
    Tensor want = {NULL, ndim, {0}};
    memcpy(want.shape, shape, (size_t)ndim * sizeof *shape);
    char sg[128], sw[128];
    tensor_shape_str(t, sg, sizeof sg);
    tensor_shape_str(&want, sw, sizeof sw);
    return fl_fail(err, FL_BAD_INPUT, "%s/%s: shape %s, but this case needs %s", c->dir, file, sg,
                   sw);
}

double case_max_row_norm(const Tensor *t, int64_t width)
{
    size_t n = t->data ? tensor_numel(t) : 0, w = width > 0 ? (size_t)width : 1;
    double best = 0.0;
    for (size_t row = 0; row + w <= n; row += w) {
        double sum = 0.0;
        for (size_t c = 0; c < w; c++)
            sum += (double)t->data[row + c] * t->data[row + c];
        if (sum > best) /* a NaN row is skipped: the non-finite rule covers it */
            best = sum;
    }
    return sqrt(best);
}

int case_too_large(const Case *c, const char *files, const char *what, double value, double limit, const char *why,
                   FlError *err)
{
    return fl_fail(err, FL_BAD_INPUT, "%s/%s: %s is %.3g, above %.3g: %s", c->dir, files, what, value, limit, why);
}

int case_warn_nonfinite(const Case *c, const char *file, const Tensor *t)
{
    size_t first = 0, count = tensor_count_nonfinite(t, &first);
    if (count == 0)
        return 0;
    char index[96];
    fl_warn("%s/%s: %zu non-finite value%s (NaN or Inf), the first at %s; outputs that depend on "
            "%s carry NaN",
            c->dir, file, count, count == 1 ? "" : "s", tensor_index_str(t, first, index, sizeof index),
            count == 1 ? "it" : "them");
    return 1;
}

static void set_dir_and_name(Case *c, const char *dir)
{
    copy_string(c->dir, sizeof c->dir, dir);
    size_t len = strlen(c->dir);
    while (len > 1 && c->dir[len - 1] == '/')
        c->dir[--len] = '\0';
    const char *slash = strrchr(c->dir, '/');
    copy_string(c->name, sizeof c->name, slash && slash[1] ? slash + 1 : c->dir);
}

/* The attention kind's folders: contiguous q, k, v, or a paged cache (k_pages.npy). */
/* ---- any kind ----------------------------------------------------------------------------- */

/* The kind of folder dir: the first kind whose marker file is there, else the default kind. */
static const CaseKind *folder_kind(const char *dir, FlError *err)
{
    const CaseKind *const *kinds = case_kinds();
    for (int i = 0; kinds[i]; i++) {
        if (!kinds[i]->marker)
            return kinds[i];
        char marker[PATH_LEN];
        join_path(marker, dir, kinds[i]->marker);
        int there = fl_path_exists(marker, err);
        if (there != 0)
            return there > 0 ? kinds[i] : NULL;
    }
    return NULL;
}

int case_load(const char *dir, int want_expected, Case *c, FlError *err)
{
    memset(c, 0, sizeof *c);
    if (strlen(dir) >= sizeof c->dir)
        return fl_fail(err, FL_BAD_INPUT, "%.200s...: case folder path too long", dir);
    set_dir_and_name(c, dir);
    c->kind = folder_kind(c->dir, err);
    if (!c->kind || c->kind->load(c, want_expected, err) != FL_OK) {
        case_free(c);
        return FL_BAD_INPUT;
    }
    return FL_OK;
}

void case_free(Case *c)
{
    if (c->kind)
        c->kind->release(c);
    c->kind_data = NULL;
}

/* ---- the folder `flashlab run --out` writes into ------------------------------------------ */

/* Is name a file some case kind reads as an input (case.json included)? */
static int is_case_input(const char *name)
{
    const CaseKind *const *kinds = case_kinds();
    for (int i = 0; kinds[i]; i++)
        for (const char *const *f = kinds[i]->input_files; *f; f++)
            if (strcmp(name, *f) == 0)
                return 1;
    return 0;
}

/* The first file of folder dir that a case reads as input, copied into name; 0 when none (or dir
 * is not a readable folder). */
static int folder_input_file(const char *dir, char *name, size_t len)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int found = 0;
    for (struct dirent *e; !found && (e = readdir(d)) != NULL;)
        if (is_case_input(e->d_name)) {
            copy_string(name, len, e->d_name);
            found = 1;
        }
    closedir(d);
    return found;
}

int case_check_out_dir(const char *out_dir, FlError *err)
{
    char path[PATH_LEN], name[256];
    if (fl_resolve_path(out_dir, path, sizeof path, err) != 0)
        return FL_BAD_INPUT;
    if (folder_input_file(path, name, sizeof name))
        return fl_fail(err, FL_BAD_INPUT,
                       "--out %s: holds %s, so it is a case folder (or looks like one); write the "
                       "outputs somewhere else",
                       out_dir, name);
    for (char *slash = strrchr(path, '/'); slash; slash = strrchr(path, '/')) {
        if (slash == path)
            path[1] = '\0'; /* the parent of "/x" is "/" */
        else
            *slash = '\0';
        if (folder_input_file(path, name, sizeof name))
            return fl_fail(err, FL_BAD_INPUT,
                           "--out %s: lies inside the case folder %s (it holds %s); write the outputs "
                           "somewhere else",
                           out_dir, path, name);
        if (slash == path)
            break;
    }
    return FL_OK;
}

int case_check_same(const Case *c, const char *fa, const Tensor *a, int da, const char *fb,
                      const Tensor *b, int db, const char *what, FlError *err)
{
    if (a->shape[da] == b->shape[db])
        return FL_OK;
    char sa[128], sb[128];
    tensor_shape_str(a, sa, sizeof sa);
    tensor_shape_str(b, sb, sizeof sb);
    return fl_fail(err, FL_BAD_INPUT, "%s: %s %s and %s %s disagree on %s (%lld vs %lld)", c->dir,
                   fa, sa, fb, sb, what, (long long)a->shape[da], (long long)b->shape[db]);
}

