/* kind_attention.c — the attention kind: q, k, v (contiguous, or a paged KV cache), optional dO and
 * learned sinks; a run writes o and lse, and dq, dk, dv (and dsinks) when it goes backward. Its
 * folders are loaded by case.c (the default kind: every folder without another kind's marker). */
#include <math.h>
#include <string.h>

#include "kind.h"
#include "random.h"

static int takes(const StageImpl *impl) { return impl->forward != NULL; }

static Direction direction(const StageImpl *impl, const Case *c, int want)
{
    const int has_backward = impl->backward && (impl->features & FEAT_BACKWARD);
    return want != DIR_FWD && c->problem.dout && has_backward ? DIR_BWD : DIR_FWD;
}

static int asks_backward(const Case *c) { return c->problem.dout != NULL; }

/* The problem a run in dir sees: a forward run ignores dO. */
static AttnProblem problem_for(const Case *c, Direction dir)
{
    AttnProblem p = c->problem;
    if (dir == DIR_FWD)
        p.dout = NULL;
    return p;
}

static int supports(const StageImpl *impl, Direction dir, const Case *c, char *short_why, size_t len,
                    FlError *why)
{
    const AttnProblem p = problem_for(c, dir);
    const unsigned missing = runner_missing_features(impl, dir, &p);
    char dims[48];
    if (missing) {
        const unsigned first = missing & (~missing + 1);
        snprintf(short_why, len, "case needs %s (stage %s)", attn_feature_name(first), attn_feature_added_by(first));
    } else if (!runner_head_dims_ok(impl, &p)) {
        snprintf(short_why, len, "case has d = %d, dv = %d; the stage runs d = dv in {%s}", p.d, p.dv,
                 stage_head_dims_text(impl, ", ", dims, sizeof dims));
    }
    return runner_check(impl, dir, &p, why);
}

/* ---- running ---------------------------------------------------------------------------------- */

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

static int run(const StageImpl *impl, Direction dir, const Case *c, const RunCtx *ctx, KindRun *r,
               FlError *err)
{
    const AttnProblem p = problem_for(c, dir);
    memset(r, 0, sizeof *r);
    if (outputs_bytes(&p) > PREFLIGHT_BYTES) {
        int rc = runner_preflight(impl, dir, &p, ctx, err);
        if (rc != FL_OK)
            return rc;
    }
    Tensor out[OUT_COUNT];
    AttnTensors t;
    int rc = runner_outputs_alloc(&p, out, &t, err);
    for (int id = 0; id < OUT_COUNT && rc == FL_OK; id++) {
        if (!out[id].data)
            continue;
        r->file[r->count] = output_file_name((OutputId)id);
        r->gradient[r->count] = id > OUT_LSE;
        r->got[r->count++] = out[id];
    }
    return rc == FL_OK ? runner_run(impl, dir, &p, &t, ctx, &r->stats, err) : rc;
}

static int time_runs(const StageImpl *impl, Direction dir, const Case *c, const RunCtx *ctx, const Timing *timing,
                     double *ms, FlError *err)
{
    const AttnProblem p = problem_for(c, dir);
    return runner_time(impl, dir, &p, ctx, timing, ms, err);
}

static const Tensor *expected(const Case *c, const char *file)
{
    for (int id = 0; id < OUT_COUNT; id++)
        if (strcmp(file, output_file_name((OutputId)id)) == 0)
            return c->expected[id].data ? &c->expected[id] : NULL;
    return NULL;
}

static const char *label(Direction dir) { return dir == DIR_BWD ? "fwd+bwd" : "fwd"; }

/* ---- numbers and words ------------------------------------------------------------------------ */

/* Query-key pairs a sliding window (with sink tokens) keeps: per row, the window run plus the
 * sink tokens before it (docs/conventions.md, "Which keys a query row sees"). */
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

/* FLOPs as the FlashAttention benchmarks count them: forward 2·B·Hq·Tq·Tk·(d + dv) (= 4·B·Hq·Tq·Tk·d
 * when d = dv), halved for causal when Tq = Tk; with a window, 2·B·Hq·(d + dv) per query-key pair
 * the window keeps; DIR_BWD times forward + backward: 3.5x forward (the backward alone is 2.5x). */
static double flops(const Case *c, Direction dir)
{
    const AttnProblem *p = &c->problem;
    double f = 2.0 * p->B * p->Hq * (double)p->Tq * p->Tk * (p->d + p->dv);
    if (p->window > 0)
        f = 2.0 * p->B * p->Hq * windowed_pairs(p) * (p->d + p->dv);
    else if (p->causal && p->Tq == p->Tk)
        f /= 2.0;
    return dir == DIR_BWD ? 3.5 * f : f;
}

static void describe(const Case *c, char *buf, size_t len)
{
    const AttnProblem *p = &c->problem;
    snprintf(buf, len, "B=%d Hq=%d Hkv=%d Tq=%d Tk=%d d=%d dv=%d%s%s", p->B, p->Hq, p->Hkv, p->Tq, p->Tk, p->d,
             p->dv, p->causal ? " causal" : "", p->sinks ? " sinks" : "");
}

static void describe_json(const Case *c, FILE *f)
{
    const AttnProblem *p = &c->problem;
    fprintf(f, "\"B\": %d, \"Hq\": %d, \"Hkv\": %d, \"Tq\": %d, \"Tk\": %d, \"d\": %d, \"dv\": %d, \"causal\": %s, "
               "\"window\": %d, \"sink_tokens\": %d, \"sinks\": %s, \"page_size\": %d, ",
            p->B, p->Hq, p->Hkv, p->Tq, p->Tk, p->d, p->dv, p->causal ? "true" : "false", p->window, p->sink_tokens,
            p->sinks ? "true" : "false", p->page_size);
}

static void columns(const Case *c, char *buf, size_t len)
{
    const AttnProblem *p = &c->problem;
    snprintf(buf, len, "%3d  %3d  %3d  %6d  %6d  %4d", p->B, p->Hq, p->Hkv, p->Tq, p->Tk, p->d);
}

/* ---- benchmark cases -------------------------------------------------------------------------- */

/* x[0..n) seeded N(0, 1). Above 2^24 elements the first 2^24 are drawn and then repeated: drawing
 * billions of normals would take the bench minutes, and the time of a kernel does not depend on
 * the values it reads (none of them is NaN or inf). */
static void fill_normal(Rng *rng, float *x, size_t n)
{
    const size_t drawn = n < ((size_t)1 << 24) ? n : (size_t)1 << 24;
    rng_fill_normal(rng, x, drawn, 1.0f);
    for (size_t done = drawn; done < n;) {
        const size_t chunk = done < n - done ? done : n - done;
        memcpy(x + done, x, chunk * sizeof(float));
        done += chunk;
    }
}

/* A paged cache: every sequence holds T keys in ceil(T / page_size) pages, the pool's pages handed
 * out in a seeded shuffled order (as an allocator that has run a while would), so consecutive pages
 * of a sequence are not neighbours in memory. Returns 0, or -1 when out of memory. */
static int page_index(const BenchShape *s, int T, Rng *rng, Case *c)
{
    const int per_seq = (T + s->page_size - 1) / s->page_size, pages = s->B * per_seq;
    int64_t table_shape[2] = {s->B, per_seq}, lens_shape[1] = {s->B};
    if (tensor_alloc_poisoned(&c->block_table, 2, table_shape) != 0 ||
        tensor_alloc_poisoned(&c->seq_lens, 1, lens_shape) != 0)
        return -1;
    int32_t *table = (int32_t *)(void *)c->block_table.data, *lens = (int32_t *)(void *)c->seq_lens.data;
    for (int i = 0; i < pages; i++)
        table[i] = i;
    for (int i = pages - 1; i > 0; i--) { /* Fisher-Yates */
        const int j = (int)(rng_next_u64(rng) % (uint64_t)(i + 1)), x = table[i];
        table[i] = table[j], table[j] = x;
    }
    for (int b = 0; b < s->B; b++)
        lens[b] = T;
    AttnProblem *p = &c->problem;
    p->page_size = s->page_size, p->num_pages = pages, p->max_pages = per_seq;
    p->block_table = table, p->seq_lens = lens;
    return 0;
}

/* Seeded normal inputs: q, dO (B, H, Tq, d) and k, v (B, Hkv, T, d), with Tq = T and Hkv = H unless
 * the shape says otherwise. With a page size and a stage that has the paged feature, k and v are
 * page pools (P, page_size, Hkv, d) holding the same number of keys per sequence. */
static int bench_case(const BenchShape *s, const StageImpl *impl, int T, int d, Direction dir, Case *c,
                      FlError *err)
{
    memset(c, 0, sizeof *c);
    c->kind = &kind_attention;
    const int paged = s->page_size > 0 && (impl->features & FEAT_PAGED);
    AttnProblem *p = &c->problem;
    p->B = s->B, p->Hq = s->H, p->Hkv = s->Hkv > 0 ? s->Hkv : s->H, p->Tq = s->Tq > 0 ? s->Tq : T, p->Tk = T;
    p->d = p->dv = d, p->scale = 1.0f / sqrtf((float)d);
    p->causal = s->causal || s->window > 0; /* a window implies causal */
    p->window = s->window, p->sink_tokens = s->sink_tokens;
    const int64_t pages = paged ? (int64_t)s->B * ((T + s->page_size - 1) / s->page_size) : 0;
    const int64_t q_shape[4] = {p->B, p->Hq, p->Tq, d}, kv_shape[4] = {p->B, p->Hkv, T, d};
    const int64_t pool_shape[4] = {pages, paged ? s->page_size : 0, p->Hkv, d}, sinks_shape[1] = {s->H};
    Tensor *all[4] = {&c->q, &c->k, &c->v, &c->dout};
    Rng rng;
    rng_seed(&rng, bench_seed(T, d));
    for (int i = 0; i < (dir == DIR_BWD ? 4 : 3); i++) {
        const int64_t *shape = i == 1 || i == 2 ? (paged ? pool_shape : kv_shape) : q_shape;
        if (tensor_alloc_poisoned(all[i], 4, shape) != 0)
            return fl_fail(err, FL_BAD_INPUT, "out of memory for inputs of T=%d d=%d", T, d);
        fill_normal(&rng, all[i]->data, tensor_numel(all[i]));
    }
    if ((s->sinks && tensor_alloc_poisoned(&c->sinks, 1, sinks_shape) != 0) ||
        (paged && page_index(s, T, &rng, c) != 0))
        return fl_fail(err, FL_BAD_INPUT, "out of memory for inputs of T=%d d=%d", T, d);
    if (s->sinks) /* learned sink logits ~ N(0, 1) */
        rng_fill_normal(&rng, c->sinks.data, tensor_numel(&c->sinks), 1.0f);
    p->sinks = c->sinks.data;
    p->q = c->q.data, p->k = c->k.data, p->v = c->v.data, p->dout = c->dout.data;
    c->is_paged = paged;
    return FL_OK;
}

static const char *const input_files[] = {"case.json",   "q.npy",       "k.npy",           "v.npy",
                                          "do.npy",      "sinks.npy",   "k_pages.npy",     "v_pages.npy",
                                          "block_table.npy", "seq_lens.npy", NULL};

static const KindHelp help[] = {
    {"check", "Paged decode cases (folders with k_pages.npy, docs/conventions.md) need the paged feature (stage 11);\n"
              "stage 11 also runs every forward attention case on a contiguous cache.\n"},
    {"run", "A paged decode case (q.npy, k_pages.npy, v_pages.npy, int32 block_table.npy and seq_lens.npy,\n"
            "optional sinks.npy; stage 11 only) writes o.npy and lse.npy.\n"},
    {NULL, NULL},
};

const CaseKind kind_attention = {
    .name = "attention",
    .marker = NULL,
    .tour_case = "tour",
    .input_files = input_files,
    .load = case_load_attention,
    .release = case_free_attention,
    .takes = takes,
    .direction = direction,
    .asks_backward = asks_backward,
    .supports = supports,
    .run = run,
    .time = time_runs,
    .expected = expected,
    .label = label,
    .flops = flops,
    .describe = describe,
    .describe_json = describe_json,
    .columns = columns,
    .bench_case = bench_case,
    .help = help,
};
