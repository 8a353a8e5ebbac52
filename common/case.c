/* case.c — loading a case folder: the kind it is (kind.h), what every kind shares (case.json, the
 * tensors and their shape checks, the non-finite warning, the --out rule), and the attention kind's
 * own folders (docs/conventions.md).
 *
 * case.json is optional: a missing file means every option takes its default (not causal,
 * window 0, sink_tokens 0, scale 1/sqrt(d), empty description). When present it must be a flat
 * JSON object with only the keys a kind allows; anything else is refused, naming case.json and the
 * key. A folder holding k_pages.npy is a paged decode case (stage 11). */
#include "case.h"
#include "kind.h"
#include "files.h"
#include "npy.h"

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

/* ---- case.json ------------------------------------------------------------------------- */

static char *read_text_file(const char *path, FlError *err)
{
    FILE *f = fl_open_regular(path, err);
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        len += fread(buf + len, 1, cap - 1 - len, f);
        if (len < cap - 1)
            break;
        char *bigger = cap < (1u << 24) ? realloc(buf, cap * 2) : NULL; /* 16 MB is plenty */
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    int failed = !buf || ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        fl_fail(err, FL_BAD_INPUT, "%s: cannot read (unreadable or larger than 16 MB)", path);
        return NULL;
    }
    buf[len] = '\0';
    return buf;
}

/* A JSON number that is a whole number in [0, INT_MAX]. */
static int json_nonneg_int(const cJSON *item, int *out)
{
    if (!cJSON_IsNumber(item))
        return -1;
    double v = item->valuedouble;
    if (!isfinite(v) || v < 0 || v > INT_MAX || v != floor(v))
        return -1;
    *out = (int)v;
    return 0;
}

/* "key 'window' must be an integer >= 0, got -1" style message for a bad option value. */
static int bad_option(const char *path, const cJSON *item, const char *rule, FlError *err)
{
    char *text = cJSON_PrintUnformatted(item);
    int rc = fl_fail(err, FL_BAD_INPUT, "%s: key '%s' must be %s, got %.60s", path, item->string,
                     rule, text ? text : "?");
    cJSON_free(text);
    return rc;
}

/* The option kinds the keys share: a bool, a finite float > 0, the description string. */
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

static int apply_option(Case *c, const char *path, const cJSON *item, FlError *err)
{
    const char *key = item->string;
    AttnProblem *p = &c->problem;
    if (strcmp(key, "causal") == 0)
        return case_option_bool(path, item, &p->causal, err);
    if (strcmp(key, "window") == 0)
        return json_nonneg_int(item, &p->window) != 0
                   ? bad_option(path, item, "an integer >= 0 (0 = no window)", err)
                   : FL_OK;
    if (strcmp(key, "sink_tokens") == 0)
        return json_nonneg_int(item, &p->sink_tokens) != 0 ? bad_option(path, item, "an integer >= 0", err)
                                                            : FL_OK;
    if (strcmp(key, "scale") == 0) {
        c->has_scale = 1;
        return case_option_positive(path, item, &p->scale, err);
    }
    if (strcmp(key, "description") == 0)
        return case_option_description(c, path, item, err);
    if (c->is_paged && strcmp(key, "page_size") == 0)
        return json_nonneg_int(item, &p->page_size) != 0 || p->page_size == 0
                   ? bad_option(path, item, "an integer >= 1", err)
                   : FL_OK;
    return case_option_unknown(path, key, "",
                               c->is_paged ? "causal, window, sink_tokens, scale, description, page_size"
                                           : "causal, window, sink_tokens, scale, description",
                               err);
}

int case_read_options(Case *c, CaseOptionFn apply, FlError *err)
{
    char path[PATH_LEN];
    join_path(path, c->dir, "case.json");
    int exists = fl_path_exists(path, err);
    if (exists <= 0)
        return exists < 0 ? FL_BAD_INPUT : FL_OK; /* absent: defaults */

    char *text = read_text_file(path, err);
    if (!text)
        return FL_BAD_INPUT;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        size_t offset = end ? (size_t)(end - text) : 0;
        free(text);
        return fl_fail(err, FL_BAD_INPUT, "%s: invalid JSON near byte %zu", path, offset);
    }
    free(text);

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
static int check_same(const Case *c, const char *fa, const Tensor *a, int da, const char *fb,
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

static int validate_inputs(const Case *c, FlError *err)
{
    const Tensor *q = &c->q, *k = &c->k, *v = &c->v;
    int rc = case_check_ndim(c, "q.npy", q, 4, "(B, Hq, Tq, d)", err);
    if (!rc)
        rc = case_check_ndim(c, "k.npy", k, 4, "(B, Hkv, Tk, d)", err);
    if (!rc)
        rc = case_check_ndim(c, "v.npy", v, 4, "(B, Hkv, Tk, dv)", err);
    if (!rc)
        rc = check_same(c, "q.npy", q, 0, "k.npy", k, 0, "B", err);
    if (!rc)
        rc = check_same(c, "q.npy", q, 3, "k.npy", k, 3, "d", err);
    if (!rc)
        rc = check_same(c, "k.npy", k, 0, "v.npy", v, 0, "B", err);
    if (!rc)
        rc = check_same(c, "k.npy", k, 1, "v.npy", v, 1, "Hkv", err);
    if (!rc)
        rc = check_same(c, "k.npy", k, 2, "v.npy", v, 2, "Tk", err);
    if (rc)
        return rc;
    if (q->shape[1] % k->shape[1] != 0)
        return fl_fail(err, FL_BAD_INPUT,
                       "%s: q.npy has Hq = %lld heads and k.npy Hkv = %lld: Hq must be a multiple "
                       "of Hkv",
                       c->dir, (long long)q->shape[1], (long long)k->shape[1]);
    return FL_OK;
}

static void fill_problem(Case *c)
{
    AttnProblem *p = &c->problem;
    p->B = (int)c->q.shape[0];
    p->Hq = (int)c->q.shape[1];
    p->Tq = (int)c->q.shape[2];
    p->d = (int)c->q.shape[3];
    p->Hkv = (int)c->k.shape[1];
    p->Tk = (int)c->k.shape[2];
    p->dv = (int)c->v.shape[3];
    if (!c->has_scale)
        p->scale = (float)(1.0 / sqrt((double)p->d));
    if (p->window > 0)
        p->causal = 1;
    p->q = c->q.data;
    p->k = c->k.data;
    p->v = c->v.data;
    p->dout = c->dout.data;
    p->sinks = c->sinks.data;
}

static int load_optional_inputs(Case *c, FlError *err)
{
    int64_t shape[TENSOR_MAX_DIMS];
    int rc = case_load_tensor(c, "do.npy", 0, &c->dout, err);
    if (!rc && c->dout.data) {
        int ndim = output_shape(&c->problem, OUT_O, shape);
        rc = case_check_shape(c, "do.npy", &c->dout, shape, ndim, err);
    }
    if (!rc)
        rc = case_load_tensor(c, "sinks.npy", 0, &c->sinks, err);
    if (!rc && c->sinks.data) {
        shape[0] = c->problem.Hq;
        rc = case_check_shape(c, "sinks.npy", &c->sinks, shape, 1, err);
    }
    return rc;
}

static int load_expected(Case *c, FlError *err)
{
    for (int id = 0; id < OUT_COUNT; id++) {
        if (!output_present(&c->problem, (OutputId)id))
            continue;
        const char *file = output_file_name((OutputId)id);
        int rc = case_load_tensor(c, file, 1, &c->expected[id], err);
        if (rc)
            return rc;
        int64_t shape[TENSOR_MAX_DIMS];
        int ndim = output_shape(&c->problem, (OutputId)id, shape);
        rc = case_check_shape(c, file, &c->expected[id], shape, ndim, err);
        if (rc)
            return rc;
    }
    return FL_OK;
}

/* ---- limits that keep the stages' arithmetic exact (docs/conventions.md, "Limits") ------- */

enum { MAX_POSITIONS = 1 << 30 }; /* Tq, Tk, seq_lens: a tile width added to a position stays an int */
#define MAX_SCORE 1e30            /* |scale * q.k| bound: scores, their maxima and exp2 arguments stay finite */

/* The largest Euclidean norm of a row of width `width` in t (float64). */
static double max_row_norm(const Tensor *t, int64_t width)
{
    size_t n = tensor_numel(t), w = width > 0 ? (size_t)width : 1;
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

/* scale <= MAX_SCORE and scale * max|q_i| * max|k_j| <= MAX_SCORE (Cauchy-Schwarz bounds every
 * score): past that, float32 scores overflow and every output would be NaN. */
static int check_scale(const Case *c, FlError *err)
{
    const AttnProblem *p = &c->problem;
    const char *where = c->has_scale ? "case.json" : "q.npy and k.npy";
    if (p->scale > MAX_SCORE)
        return fl_fail(err, FL_BAD_INPUT, "%s/case.json: scale %g is above %g: scores would overflow float32",
                       c->dir, p->scale, MAX_SCORE);
    double bound = p->scale * max_row_norm(&c->q, p->d) * max_row_norm(&c->k, p->d);
    if (bound > MAX_SCORE)
        return fl_fail(err, FL_BAD_INPUT,
                       "%s/%s: scale %g times the largest |q| and |k| (%g) bounds the scores by %g, "
                       "above %g: float32 scores would overflow",
                       c->dir, where, p->scale, bound / p->scale, bound, MAX_SCORE);
    return FL_OK;
}

/* Sequence lengths below MAX_POSITIONS and every output small enough to index with an int. */
static int check_sizes_fit(const Case *c, FlError *err)
{
    const AttnProblem *p = &c->problem;
    if (p->Tq >= MAX_POSITIONS || p->Tk >= MAX_POSITIONS)
        return fl_fail(err, FL_BAD_INPUT, "%s: %s = %d positions; flashlab runs sequences of fewer than %d",
                       c->dir, p->Tq >= MAX_POSITIONS ? "Tq" : "Tk", p->Tq >= MAX_POSITIONS ? p->Tq : p->Tk,
                       MAX_POSITIONS);
    for (int id = 0; id < OUT_COUNT; id++) {
        if (!output_present(p, (OutputId)id))
            continue;
        int64_t shape[TENSOR_MAX_DIMS];
        int ndim = output_shape(p, (OutputId)id, shape);
        double numel = 1.0;
        for (int i = 0; i < ndim; i++)
            numel *= (double)shape[i];
        if (numel > INT_MAX)
            return fl_fail(err, FL_BAD_INPUT,
                           "%s: %s would hold %.0f elements, more than the %d a stage can index", c->dir,
                           output_file_name((OutputId)id), numel, INT_MAX);
    }
    return FL_OK;
}

/* One warning line per input file holding NaN or Inf; returns how many files did. */
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

static int warn_nonfinite_inputs(const Case *c)
{
    const char *kv = c->is_paged ? "_pages" : "";
    char kname[32], vname[32];
    snprintf(kname, sizeof kname, "k%s.npy", kv);
    snprintf(vname, sizeof vname, "v%s.npy", kv);
    return case_warn_nonfinite(c, "q.npy", &c->q) + case_warn_nonfinite(c, kname, &c->k) +
           case_warn_nonfinite(c, vname, &c->v) + case_warn_nonfinite(c, "do.npy", &c->dout) +
           case_warn_nonfinite(c, "sinks.npy", &c->sinks);
}

/* ---- paged decode cases (stage 11) -------------------------------------------------------- */

/* Shapes: q (B, Hq, Tq, d), k_pages (P, page_size, Hkv, d), v_pages (P, page_size, Hkv, dv),
 * block_table (B, max_pages), seq_lens (B), each against the others and case.json's page_size. */
static int validate_paged_shapes(const Case *c, FlError *err)
{
    const Tensor *q = &c->q, *k = &c->k, *v = &c->v, *bt = &c->block_table, *sl = &c->seq_lens;
    int rc = case_check_ndim(c, "q.npy", q, 4, "(B, Hq, Tq, d)", err);
    if (!rc)
        rc = case_check_ndim(c, "k_pages.npy", k, 4, "(P, page_size, Hkv, d)", err);
    if (!rc)
        rc = case_check_ndim(c, "v_pages.npy", v, 4, "(P, page_size, Hkv, dv)", err);
    if (!rc)
        rc = case_check_ndim(c, "block_table.npy", bt, 2, "(B, max_pages)", err);
    if (!rc)
        rc = case_check_ndim(c, "seq_lens.npy", sl, 1, "(B)", err);
    for (int dim = 0; dim < 3 && !rc; dim++) {
        static const char *const what[3] = {"P", "page_size", "Hkv"};
        rc = check_same(c, "k_pages.npy", k, dim, "v_pages.npy", v, dim, what[dim], err);
    }
    if (!rc)
        rc = check_same(c, "q.npy", q, 3, "k_pages.npy", k, 3, "d", err);
    if (!rc)
        rc = check_same(c, "q.npy", q, 0, "block_table.npy", bt, 0, "B", err);
    if (!rc)
        rc = check_same(c, "q.npy", q, 0, "seq_lens.npy", sl, 0, "B", err);
    if (rc)
        return rc;
    if (q->shape[1] % k->shape[2] != 0)
        return fl_fail(err, FL_BAD_INPUT,
                       "%s: q.npy has Hq = %lld heads and k_pages.npy Hkv = %lld: Hq must be a multiple of Hkv",
                       c->dir, (long long)q->shape[1], (long long)k->shape[2]);
    if (c->problem.page_size != 0 && c->problem.page_size != k->shape[1])
        return fl_fail(err, FL_BAD_INPUT, "%s/case.json: page_size %d, but k_pages.npy holds pages of %lld slots",
                       c->dir, c->problem.page_size, (long long)k->shape[1]);
    return FL_OK;
}

/* Every sequence holds Tq..max_pages*page_size keys, and every page it uses is in [0, P). */
static int validate_paged_entries(const Case *c, FlError *err)
{
    const AttnProblem *p = &c->problem;
    const int32_t *len = tensor_int32(&c->seq_lens), *table = tensor_int32(&c->block_table);
    const long long capacity = (long long)p->max_pages * p->page_size;
    for (int b = 0; b < p->B; b++) {
        if (len[b] < p->Tq || len[b] > capacity)
            return fl_fail(err, FL_BAD_INPUT,
                           "%s/seq_lens.npy: entry [%d] = %d; a sequence holds at least its Tq = %d queries and "
                           "at most max_pages * page_size = %lld keys",
                           c->dir, b, (int)len[b], p->Tq, capacity);
        /* 64-bit: len[b] + page_size - 1 overflows int for a length near INT_MAX */
        const int used = (int)(((long long)len[b] + p->page_size - 1) / p->page_size);
        for (int i = 0; i < used; i++) {
            const int32_t page = table[(size_t)b * p->max_pages + i];
            if (page < 0 || page >= p->num_pages)
                return fl_fail(err, FL_BAD_INPUT,
                               "%s/block_table.npy: entry [%d, %d] = %d is not a page of k_pages.npy "
                               "(0..%d); sequence %d uses its first %d entries",
                               c->dir, b, i, (int)page, p->num_pages - 1, b, used);
        }
    }
    return FL_OK;
}

/* The problem of a paged case: Tk is the longest sequence. */
static void fill_paged_problem(Case *c)
{
    AttnProblem *p = &c->problem;
    p->B = (int)c->q.shape[0], p->Hq = (int)c->q.shape[1], p->Tq = (int)c->q.shape[2];
    p->d = (int)c->q.shape[3];
    p->num_pages = (int)c->k.shape[0], p->page_size = (int)c->k.shape[1];
    p->Hkv = (int)c->k.shape[2], p->dv = (int)c->v.shape[3];
    p->max_pages = (int)c->block_table.shape[1];
    if (!c->has_scale)
        p->scale = (float)(1.0 / sqrt((double)p->d));
    if (p->window > 0)
        p->causal = 1;
    p->q = c->q.data, p->k = c->k.data, p->v = c->v.data, p->sinks = c->sinks.data;
    p->block_table = tensor_int32(&c->block_table);
    p->seq_lens = tensor_int32(&c->seq_lens);
    p->Tk = 0;
    for (int b = 0; b < p->B; b++)
        if (p->seq_lens[b] > p->Tk)
            p->Tk = p->seq_lens[b];
}

static int load_paged(Case *c, int want_expected, FlError *err)
{
    char path[PATH_LEN];
    join_path(path, c->dir, "do.npy");
    int has_dout = fl_path_exists(path, err);
    if (has_dout != 0)
        return has_dout < 0 ? FL_BAD_INPUT
                            : fl_fail(err, FL_BAD_INPUT, "%s: paged decode cases are forward only; remove do.npy", path);
    int rc = case_load_tensor(c, "q.npy", 1, &c->q, err);
    if (!rc)
        rc = case_load_tensor(c, "k_pages.npy", 1, &c->k, err);
    if (!rc)
        rc = case_load_tensor(c, "v_pages.npy", 1, &c->v, err);
    for (int i = 0; i < 2 && !rc; i++) {
        join_path(path, c->dir, i == 0 ? "block_table.npy" : "seq_lens.npy");
        rc = npy_read_as(path, NPY_INT32, i == 0 ? &c->block_table : &c->seq_lens, err);
    }
    if (!rc)
        rc = validate_paged_shapes(c, err);
    if (!rc)
        rc = case_load_tensor(c, "sinks.npy", 0, &c->sinks, err);
    if (!rc && c->sinks.data) {
        const int64_t shape[1] = {c->q.shape[1]};
        rc = case_check_shape(c, "sinks.npy", &c->sinks, shape, 1, err);
    }
    if (rc)
        return rc;
    fill_paged_problem(c);
    rc = validate_paged_entries(c, err);
    if (!rc)
        rc = check_sizes_fit(c, err);
    if (!rc)
        rc = check_scale(c, err);
    return !rc && want_expected ? load_expected(c, err) : rc;
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
static int load_attention(Case *c, int want_expected, FlError *err)
{
    char marker[PATH_LEN];
    join_path(marker, c->dir, "k_pages.npy");
    c->is_paged = fl_path_exists(marker, err);
    if (c->is_paged < 0)
        return FL_BAD_INPUT;
    int rc = case_read_options(c, apply_option, err);
    if (!rc && c->is_paged)
        return load_paged(c, want_expected, err);
    if (!rc)
        rc = case_load_tensor(c, "q.npy", 1, &c->q, err);
    if (!rc)
        rc = case_load_tensor(c, "k.npy", 1, &c->k, err);
    if (!rc)
        rc = case_load_tensor(c, "v.npy", 1, &c->v, err);
    if (!rc)
        rc = validate_inputs(c, err);
    if (rc)
        return rc;
    fill_problem(c); /* sizes are needed to check do.npy and sinks.npy */
    rc = load_optional_inputs(c, err);
    if (rc)
        return rc;
    fill_problem(c); /* now with dout and sinks */
    rc = check_sizes_fit(c, err);
    if (!rc)
        rc = check_scale(c, err);
    return !rc && want_expected ? load_expected(c, err) : rc;
}

int case_load_attention(Case *c, int want_expected, FlError *err)
{
    int rc = load_attention(c, want_expected, err);
    if (rc == FL_OK)
        c->nonfinite_inputs = warn_nonfinite_inputs(c);
    return rc;
}

void case_free_attention(Case *c)
{
    tensor_free(&c->q);
    tensor_free(&c->k);
    tensor_free(&c->v);
    tensor_free(&c->dout);
    tensor_free(&c->sinks);
    tensor_free(&c->block_table);
    tensor_free(&c->seq_lens);
    for (int id = 0; id < OUT_COUNT; id++)
        tensor_free(&c->expected[id]);
    memset(&c->problem, 0, sizeof c->problem);
}

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

/* ---- outputs --------------------------------------------------------------------------- */

const char *output_file_name(OutputId id)
{
    static const char *const names[OUT_COUNT] = {"o.npy",  "lse.npy", "dq.npy",
                                                 "dk.npy", "dv.npy",  "dsinks.npy"};
    return (unsigned)id < OUT_COUNT ? names[id] : "?";
}

int output_shape(const AttnProblem *p, OutputId id, int64_t shape[TENSOR_MAX_DIMS])
{
    switch (id) {
    case OUT_O: /* (B, Hq, Tq, dv) */
        shape[0] = p->B, shape[1] = p->Hq, shape[2] = p->Tq, shape[3] = p->dv;
        return 4;
    case OUT_LSE: /* (B, Hq, Tq) */
        shape[0] = p->B, shape[1] = p->Hq, shape[2] = p->Tq;
        return 3;
    case OUT_DQ: /* (B, Hq, Tq, d) */
        shape[0] = p->B, shape[1] = p->Hq, shape[2] = p->Tq, shape[3] = p->d;
        return 4;
    case OUT_DK: /* (B, Hkv, Tk, d) */
        shape[0] = p->B, shape[1] = p->Hkv, shape[2] = p->Tk, shape[3] = p->d;
        return 4;
    case OUT_DV: /* (B, Hkv, Tk, dv) */
        shape[0] = p->B, shape[1] = p->Hkv, shape[2] = p->Tk, shape[3] = p->dv;
        return 4;
    case OUT_DSINKS: /* (Hq) */
        shape[0] = p->Hq;
        return 1;
    default:
        return 0;
    }
}

int output_present(const AttnProblem *p, OutputId id)
{
    switch (id) {
    case OUT_O:
    case OUT_LSE:
        return 1;
    case OUT_DQ:
    case OUT_DK:
    case OUT_DV:
        return p->dout != NULL;
    case OUT_DSINKS: /* a gradient: needs the backward pass and the sink logits */
        return p->dout != NULL && p->sinks != NULL;
    default:
        return 0;
    }
}
