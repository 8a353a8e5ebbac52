/* case_attention.c — the attention kind's folders (docs/conventions.md): q, k, v (or the page pools
 * of a paged decode case, k_pages.npy present), optional do.npy and sinks.npy, case.json with
 * causal, window, sink_tokens, scale, description (and page_size), the expected outputs; every shape
 * checked against the others and the limits that keep the stages' arithmetic exact. */
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "case.h"
#include "files.h"
#include "npy.h"

enum { PATH_LEN = 4096 + 64 };

static int apply_option(Case *c, const char *path, const cJSON *item, FlError *err)
{
    const char *key = item->string;
    AttnProblem *p = &c->problem;
    if (strcmp(key, "causal") == 0)
        return case_option_bool(path, item, &p->causal, err);
    if (strcmp(key, "window") == 0)
        return case_option_int(path, item, 0, "an integer >= 0 (0 = no window)", &p->window, err);
    if (strcmp(key, "sink_tokens") == 0)
        return case_option_int(path, item, 0, "an integer >= 0", &p->sink_tokens, err);
    if (strcmp(key, "scale") == 0) {
        c->has_scale = 1;
        return case_option_positive(path, item, &p->scale, err);
    }
    if (strcmp(key, "description") == 0)
        return case_option_description(c, path, item, err);
    if (c->is_paged && strcmp(key, "page_size") == 0)
        return case_option_int(path, item, 1, "an integer >= 1", &p->page_size, err);
    return case_option_unknown(path, key, "",
                               c->is_paged ? "causal, window, sink_tokens, scale, description, page_size"
                                           : "causal, window, sink_tokens, scale, description",
                               err);
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
        rc = case_check_same(c, "q.npy", q, 0, "k.npy", k, 0, "B", err);
    if (!rc)
        rc = case_check_same(c, "q.npy", q, 3, "k.npy", k, 3, "d", err);
    if (!rc)
        rc = case_check_same(c, "k.npy", k, 0, "v.npy", v, 0, "B", err);
    if (!rc)
        rc = case_check_same(c, "k.npy", k, 1, "v.npy", v, 1, "Hkv", err);
    if (!rc)
        rc = case_check_same(c, "k.npy", k, 2, "v.npy", v, 2, "Tk", err);
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

#define MAX_SCORE_BWD 1048576.0 /* 2^20: |score| bound when the backward recomputes P = exp(s - lse) */

/* Magnitudes that keep every float32 sum and product of the stages finite (docs/conventions.md,
 * "Limits on what a case may ask for"), bounded through Cauchy-Schwarz by the largest row norms:
 * the raw dot products q.k, the scores scale q.k (2^20 with a backward pass, whose recomputed
 * exp(s - lse) must not overflow from one rounding of s), the forward's unnormalised sums
 * sum_j exp(s - m) v_j, and the backward's dP = dO.v and the sums that form dQ, dK and dV. */
static int check_magnitudes(const Case *c, FlError *err)
{
    const AttnProblem *p = &c->problem;
    const double q = case_max_row_norm(&c->q, p->d), k = case_max_row_norm(&c->k, p->d), v = case_max_row_norm(&c->v, p->dv);
    const double dout = case_max_row_norm(&c->dout, p->dv), keys = p->Tk, rows = p->Tq;
    const char *qk = c->is_paged ? "q.npy and k_pages.npy" : "q.npy and k.npy";
    if (p->scale > MAX_FLOAT_SUM)
        return case_too_large(c, "case.json", "scale", p->scale, MAX_FLOAT_SUM, "scores would overflow float32", err);
    if (q * k > MAX_FLOAT_SUM)
        return case_too_large(c, qk, "the largest |q| times the largest |k|", q * k, MAX_FLOAT_SUM,
                         "q.k would overflow float32 before the scale", err);
    const double score_limit = p->dout ? MAX_SCORE_BWD : MAX_FLOAT_SUM;
    if (p->scale * q * k > score_limit)
        return case_too_large(c, c->has_scale ? "case.json" : qk, "scale times the largest |q| and |k|", p->scale * q * k,
                         score_limit,
                         p->dout ? "the backward recomputes exp(s - lse), and one rounding of so large a score "
                                   "overflows it"
                                 : "float32 scores would overflow",
                         err);
    if (keys * v > MAX_FLOAT_SUM)
        return case_too_large(c, c->is_paged ? "v_pages.npy" : "v.npy", "Tk times the largest |v|", keys * v, MAX_FLOAT_SUM,
                         "the forward's sums of exp(s - m) v over the keys would overflow float32", err);
    /* |dP| + |D| <= 2 |dO| |v|; dQ and dK sum T products dS.k or dS.q, formed before or after the
     * scale depending on the stage, so the larger of scale and 1 bounds them */
    const double grad = 2.0 * dout * v, sums = fmax(1.0, p->scale) * grad * fmax(keys * k, rows * q);
    if (dout * v > MAX_FLOAT_SUM || rows * dout > MAX_FLOAT_SUM || sums > MAX_FLOAT_SUM)
        return case_too_large(c, "do.npy", "the gradients' bound (|dO| |v|, Tq |dO|, |dS| T |q| or |k|)",
                         fmax(fmax(dout * v, rows * dout), sums), MAX_FLOAT_SUM,
                         "dP = dO.v or the sums forming dQ, dK, dV would overflow float32", err);
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
/* A page pool (P, page_size, Hkv, width) of a paged case: one warning when a slot some sequence uses
 * holds NaN or Inf. The slots no sequence uses are never read (the golden cases fill them with NaN
 * to catch a stage that reads them), so they do not count. Returns 1 when it warned. */
static int warn_nonfinite_pool(const Case *c, const char *file, const Tensor *pool)
{
    const AttnProblem *p = &c->problem;
    const size_t row = (size_t)p->Hkv * (size_t)pool->shape[3];
    size_t count = 0, first = 0;
    for (int b = 0; b < p->B; b++)
        for (int j = 0; j < p->seq_lens[b]; j++) {
            const size_t page = (size_t)p->block_table[(size_t)b * p->max_pages + j / p->page_size];
            const size_t base = (page * (size_t)p->page_size + (size_t)(j % p->page_size)) * row;
            for (size_t e = 0; e < row; e++)
                if (!isfinite(pool->data[base + e]) && count++ == 0)
                    first = base + e;
        }
    if (count == 0)
        return 0;
    char index[96];
    fl_warn("%s/%s: %zu non-finite value%s (NaN or Inf) in the slots the sequences use, the first at %s; outputs "
            "that depend on %s carry NaN",
            c->dir, file, count, count == 1 ? "" : "s", tensor_index_str(pool, first, index, sizeof index),
            count == 1 ? "it" : "them");
    return 1;
}

static int warn_nonfinite_inputs(const Case *c)
{
    int files = case_warn_nonfinite(c, "q.npy", &c->q) + case_warn_nonfinite(c, "do.npy", &c->dout) +
                case_warn_nonfinite(c, "sinks.npy", &c->sinks);
    if (c->is_paged)
        return files + warn_nonfinite_pool(c, "k_pages.npy", &c->k) + warn_nonfinite_pool(c, "v_pages.npy", &c->v);
    return files + case_warn_nonfinite(c, "k.npy", &c->k) + case_warn_nonfinite(c, "v.npy", &c->v);
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
        rc = case_check_same(c, "k_pages.npy", k, dim, "v_pages.npy", v, dim, what[dim], err);
    }
    if (!rc)
        rc = case_check_same(c, "q.npy", q, 3, "k_pages.npy", k, 3, "d", err);
    if (!rc)
        rc = case_check_same(c, "q.npy", q, 0, "block_table.npy", bt, 0, "B", err);
    if (!rc)
        rc = case_check_same(c, "q.npy", q, 0, "seq_lens.npy", sl, 0, "B", err);
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
    case_path(c, "do.npy", path, sizeof path);
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
        case_path(c, i == 0 ? "block_table.npy" : "seq_lens.npy", path, sizeof path);
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
        rc = check_magnitudes(c, err);
    return !rc && want_expected ? load_expected(c, err) : rc;
}

static int load_attention(Case *c, int want_expected, FlError *err)
{
    char marker[PATH_LEN];
    case_path(c, "k_pages.npy", marker, sizeof marker);
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
        rc = check_magnitudes(c, err);
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
        return attn_has_dout(p);
    case OUT_DSINKS: /* a gradient: needs the backward pass and the sink logits */
        return attn_has_dout(p) && p->sinks != NULL;
    default:
        return 0;
    }
}
