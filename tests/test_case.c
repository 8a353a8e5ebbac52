/* test_case.c — loading case folders: a good case (defaults and options), the expected outputs,
 * and every kind of bad input the loader must refuse with a message naming the file. Fixtures are
 * written into a fresh temporary folder with npy_write(). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "case.h"
#include "kind_mla.h"
#include "npy.h"
#include "test_support.h"

static char tmpdir[256];
static int case_number;

/* A fresh case folder path under tmpdir. */
static const char *new_case_dir(char *dir, size_t len)
{
    snprintf(dir, len, "%s/case%02d", tmpdir, case_number++);
    if (mkdir(dir, 0755) != 0) {
        perror(dir);
        exit(2);
    }
    return dir;
}

static void write_tensor(const char *dir, const char *file, int ndim, int64_t d0, int64_t d1,
                         int64_t d2, int64_t d3)
{
    int64_t shape[4] = {d0, d1, d2, d3};
    Tensor t;
    if (tensor_alloc_poisoned(&t, ndim, shape) != 0)
        exit(2);
    for (size_t i = 0; i < tensor_numel(&t); i++)
        t.data[i] = (float)((i * 7) % 13) * 0.1f - 0.6f;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FlError err;
    if (npy_write(path, &t, &err) != FL_OK) {
        fprintf(stderr, "fixture: %s\n", err.msg);
        exit(2);
    }
    tensor_free(&t);
}

static void write_text(const char *dir, const char *file, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(2);
    }
    fputs(text, f);
    fclose(f);
}

/* q (B, Hq, Tq, d), k (B, Hkv, Tk, d), v (B, Hkv, Tk, dv) with B = 2, Tq = 5, Tk = 7, d = 8, dv = 6. */
static void write_inputs(const char *dir, int Hq, int Hkv)
{
    write_tensor(dir, "q.npy", 4, 2, Hq, 5, 8);
    write_tensor(dir, "k.npy", 4, 2, Hkv, 7, 8);
    write_tensor(dir, "v.npy", 4, 2, Hkv, 7, 6);
}

static int all_absent(const Case *c)
{
    int absent = !c->q.data && !c->k.data && !c->v.data && !c->dout.data && !c->sinks.data && !c->kind_data;
    for (int i = 0; i < OUT_COUNT; i++)
        absent = absent && !c->expected[i].data;
    return absent;
}

/* case_load(dir) must fail with FL_BAD_INPUT, leave nothing allocated, and say each phrase. */
static void expect_refused(const char *dir, int want_expected, const char *phrase1,
                           const char *phrase2, int line)
{
    Case c;
    FlError err = {{0}};
    int rc = case_load(dir, want_expected, &c, &err);
    int ok = rc == FL_BAD_INPUT && all_absent(&c) && strstr(err.msg, dir) &&
             strstr(err.msg, phrase1) && (!phrase2 || strstr(err.msg, phrase2));
    if (!ok) {
        test_fail(__FILE__, line, "rc %d, message \"%s\", wanted \"%s\"%s%s%s", rc, err.msg,
                  phrase1, phrase2 ? " and \"" : "", phrase2 ? phrase2 : "", phrase2 ? "\"" : "");
    }
    if (rc == FL_OK)
        case_free(&c);
}

static void test_good_case_defaults(void)
{
    char dir[512];
    new_case_dir(dir, sizeof dir);
    write_inputs(dir, 6, 2);
    Case c;
    FlError err = {{0}};
    EXPECT(case_load(dir, 0, &c, &err) == FL_OK);
    const AttnProblem *p = &c.problem;
    EXPECT(p->B == 2 && p->Hq == 6 && p->Hkv == 2 && p->Tq == 5 && p->Tk == 7 && p->d == 8 &&
           p->dv == 6);
    EXPECT(fabsf(p->scale - 1.0f / sqrtf(8.0f)) < 1e-7f && !c.has_scale);
    EXPECT(p->causal == 0 && p->window == 0 && p->sink_tokens == 0);
    EXPECT(p->q == c.q.data && p->k == c.k.data && p->v == c.v.data);
    EXPECT(p->dout == NULL && p->sinks == NULL);
    EXPECT(strcmp(c.name, "case00") == 0 && c.description[0] == '\0');
    EXPECT(attn_required_features(p) == FEAT_GQA);
    case_free(&c);
    EXPECT(all_absent(&c));
}

static void test_good_case_options(void)
{
    char dir[512];
    new_case_dir(dir, sizeof dir);
    write_inputs(dir, 3, 3);
    write_text(dir, "case.json",
               "{\"window\": 4, \"sink_tokens\": 2, \"scale\": 0.25, \"causal\": false,\n"
               " \"description\": \"sliding window with sinks\"}\n");
    write_tensor(dir, "do.npy", 4, 2, 3, 5, 6);
    write_tensor(dir, "sinks.npy", 1, 3, 0, 0, 0);
    Case c;
    FlError err = {{0}};
    char with_slash[600];
    snprintf(with_slash, sizeof with_slash, "%s/", dir); /* a trailing slash is fine */
    EXPECT(case_load(with_slash, 0, &c, &err) == FL_OK);
    const AttnProblem *p = &c.problem;
    EXPECT(p->window == 4 && p->causal == 1); /* a window implies causal */
    EXPECT(p->sink_tokens == 2 && p->scale == 0.25f && c.has_scale);
    EXPECT(strcmp(c.description, "sliding window with sinks") == 0);
    EXPECT(strcmp(c.name, "case01") == 0);
    EXPECT(p->dout == c.dout.data && p->dout && p->sinks == c.sinks.data && p->sinks);
    EXPECT(attn_required_features(p) == (FEAT_BACKWARD | FEAT_CAUSAL | FEAT_WINDOW |
                                         FEAT_SINK_TOKENS | FEAT_SINKS));
    for (int id = 0; id < OUT_COUNT; id++)
        EXPECT(output_present(p, (OutputId)id));
    case_free(&c);

    /* the expected outputs: all six required here, each shape-checked */
    write_tensor(dir, "o.npy", 4, 2, 3, 5, 6);
    write_tensor(dir, "lse.npy", 3, 2, 3, 5, 0);
    write_tensor(dir, "dq.npy", 4, 2, 3, 5, 8);
    write_tensor(dir, "dk.npy", 4, 2, 3, 7, 8);
    write_tensor(dir, "dv.npy", 4, 2, 3, 7, 6);
    expect_refused(dir, 1, "dsinks.npy", "No such file", __LINE__);
    write_tensor(dir, "dsinks.npy", 1, 3, 0, 0, 0);
    EXPECT(case_load(dir, 1, &c, &err) == FL_OK);
    for (int id = 0; id < OUT_COUNT; id++)
        EXPECT(c.expected[id].data != NULL);
    EXPECT(c.expected[OUT_LSE].ndim == 3 && c.expected[OUT_DK].shape[2] == 7);
    case_free(&c);

    write_tensor(dir, "dk.npy", 4, 2, 3, 7, 6); /* (B, Hkv, Tk, dv) instead of d */
    expect_refused(dir, 1, "dk.npy", "(2, 3, 7, 8)", __LINE__);
}

static void test_expected_forward_only(void)
{
    char dir[512];
    new_case_dir(dir, sizeof dir);
    write_inputs(dir, 2, 1);
    write_text(dir, "case.json", "{\"causal\": true}");
    expect_refused(dir, 1, "o.npy", "No such file", __LINE__);
    write_tensor(dir, "o.npy", 4, 2, 2, 5, 6);
    write_tensor(dir, "lse.npy", 3, 2, 2, 5, 0);
    Case c;
    FlError err = {{0}};
    EXPECT(case_load(dir, 1, &c, &err) == FL_OK); /* no do.npy: no gradients needed */
    EXPECT(c.expected[OUT_O].data && c.expected[OUT_LSE].data && !c.expected[OUT_DQ].data);
    EXPECT(!output_present(&c.problem, OUT_DQ) && !output_present(&c.problem, OUT_DSINKS));
    EXPECT(attn_required_features(&c.problem) == (FEAT_CAUSAL | FEAT_GQA));
    int64_t shape[TENSOR_MAX_DIMS];
    EXPECT(output_shape(&c.problem, OUT_LSE, shape) == 3 && shape[2] == 5);
    EXPECT(output_shape(&c.problem, OUT_DV, shape) == 4 && shape[1] == 1 && shape[3] == 6);
    EXPECT(output_shape(&c.problem, OUT_DSINKS, shape) == 1 && shape[0] == 2);
    EXPECT(strcmp(output_file_name(OUT_DSINKS), "dsinks.npy") == 0);
    case_free(&c);

    write_tensor(dir, "lse.npy", 4, 2, 2, 5, 1); /* lse must be (B, Hq, Tq) */
    expect_refused(dir, 1, "lse.npy", "(2, 2, 5)", __LINE__);
}

static void test_bad_inputs(void)
{
    char dir[512];

    new_case_dir(dir, sizeof dir); /* missing q.npy */
    write_inputs(dir, 2, 2);
    char q[600];
    snprintf(q, sizeof q, "%s/q.npy", dir);
    unlink(q);
    expect_refused(dir, 0, "q.npy", "No such file", __LINE__);

    new_case_dir(dir, sizeof dir); /* k and v disagree on Tk */
    write_inputs(dir, 2, 2);
    write_tensor(dir, "v.npy", 4, 2, 2, 9, 6);
    expect_refused(dir, 0, "k.npy (2, 2, 7, 8) and v.npy (2, 2, 9, 6)", "Tk", __LINE__);

    new_case_dir(dir, sizeof dir); /* q and k disagree on d */
    write_inputs(dir, 2, 2);
    write_tensor(dir, "k.npy", 4, 2, 2, 7, 4);
    expect_refused(dir, 0, "q.npy (2, 2, 5, 8) and k.npy (2, 2, 7, 4)", "disagree on d", __LINE__);

    new_case_dir(dir, sizeof dir); /* Hq % Hkv != 0 */
    write_inputs(dir, 3, 2);
    expect_refused(dir, 0, "Hq = 3", "multiple of Hkv", __LINE__);

    new_case_dir(dir, sizeof dir); /* q with 3 dimensions */
    write_inputs(dir, 2, 2);
    write_tensor(dir, "q.npy", 3, 2, 5, 8, 0);
    expect_refused(dir, 0, "q.npy", "expected 4 dimensions", __LINE__);

    new_case_dir(dir, sizeof dir); /* a zero size */
    write_inputs(dir, 2, 2);
    write_tensor(dir, "q.npy", 4, 2, 2, 0, 8);
    expect_refused(dir, 0, "q.npy", ">= 1", __LINE__);

    new_case_dir(dir, sizeof dir); /* do.npy with the wrong shape */
    write_inputs(dir, 2, 2);
    write_tensor(dir, "do.npy", 4, 2, 2, 5, 8); /* dv is 6, not 8 */
    expect_refused(dir, 0, "do.npy", "(2, 2, 5, 6)", __LINE__);

    new_case_dir(dir, sizeof dir); /* sinks.npy with the wrong length */
    write_inputs(dir, 2, 2);
    write_tensor(dir, "sinks.npy", 1, 3, 0, 0, 0);
    expect_refused(dir, 0, "sinks.npy", "(2,)", __LINE__);

    new_case_dir(dir, sizeof dir); /* an unreadable .npy surfaces the reader's message */
    write_inputs(dir, 2, 2);
    write_text(dir, "v.npy", "not numpy");
    expect_refused(dir, 0, "v.npy", "bad magic", __LINE__);

    expect_refused("/nonexistent/flashlab/case", 0, "q.npy", "No such file", __LINE__);
}

static void test_bad_case_json(void)
{
    static const struct {
        const char *json, *phrase;
    } bad[] = {
        {"{\"window\": -1}", "'window'"},
        {"{\"window\": 2.5}", "'window'"},
        {"{\"sink_tokens\": -3}", "'sink_tokens'"},
        {"{\"causal\": 1}", "'causal'"},
        {"{\"window\": \"4\"}", "'window'"},
        {"{\"scale\": 0}", "'scale'"},
        {"{\"scale\": -0.5}", "'scale'"},
        {"{\"scale\": 1e300}", "'scale'"},
        {"{\"window\": -1}", "got -1"},
        {"{\"description\": 3}", "'description'"},
        {"{\"casual\": true}", "unknown key 'casual'"},
        {"{\"causal\": true, \"causal\": false}", "appears twice"},
        {"[{\"causal\": true}]", "JSON object"},
        {"true", "JSON object"},
        {"{\"causal\": true", "invalid JSON"},
        {"{causal: true}", "invalid JSON"},
        {"{\"causal\": true} trailing", "invalid JSON"},
        {"", "invalid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char dir[512];
        new_case_dir(dir, sizeof dir);
        write_inputs(dir, 2, 2);
        write_text(dir, "case.json", bad[i].json);
        expect_refused(dir, 0, "case.json", bad[i].phrase, __LINE__);
    }
}

/* An MLA case (stage 09): B = 2, Tq = 2, Tk = 5, D = 6, mq = 4, H = 3, dh = 4, m = 5, p = 2, dv = 3. */
static void write_mla_inputs(const char *dir)
{
    write_tensor(dir, "x.npy", 3, 2, 2, 6, 0);
    write_tensor(dir, "ckv.npy", 3, 2, 5, 5, 0);
    write_tensor(dir, "kpe.npy", 3, 2, 5, 2, 0);
    write_tensor(dir, "w_dq.npy", 2, 6, 4, 0, 0);
    write_tensor(dir, "w_uq.npy", 3, 4, 3, 4, 0);
    write_tensor(dir, "w_qr.npy", 3, 4, 3, 2, 0);
    write_tensor(dir, "w_uk.npy", 3, 5, 3, 4, 0);
    write_tensor(dir, "w_uv.npy", 3, 5, 3, 3, 0);
    write_tensor(dir, "w_o.npy", 3, 3, 3, 6, 0);
}

static void test_mla_case(void)
{
    char dir[512];
    new_case_dir(dir, sizeof dir); /* a good one: sizes from the files, defaults */
    write_mla_inputs(dir);
    Case c;
    FlError err = {{0}};
    if (case_load(dir, 0, &c, &err) != FL_OK) {
        test_fail(__FILE__, __LINE__, "good MLA case refused: %s", err.msg);
    } else {
        const MlaProblem *p = mla_case_problem(&c);
        EXPECT(p && c.kind == &kind_mla && p->B == 2 && p->Tq == 2 && p->Tk == 5 && p->D == 6 && p->mq == 4 && p->H == 3);
        EXPECT(p->dh == 4 && p->m == 5 && p->p == 2 && p->dv == 3 && !p->causal);
        EXPECT(p->rope_theta == 10000.0f && fabsf(p->scale - 1.0f / sqrtf(6.0f)) < 1e-7f);
        EXPECT(p->in[MLA_W_O] == mla_case_input(&c, MLA_W_O)->data && !c.q.data);
        case_free(&c);
    }
    write_text(dir, "case.json", "{\"causal\": true, \"rope_theta\": 500, \"description\": \"mla\"}");
    if (case_load(dir, 0, &c, &err) != FL_OK) {
        test_fail(__FILE__, __LINE__, "MLA case with options refused: %s", err.msg);
    } else {
        const MlaProblem *p = mla_case_problem(&c);
        EXPECT(p && p->causal && p->rope_theta == 500.0f && !strcmp(c.description, "mla"));
        case_free(&c);
    }
    expect_refused(dir, 1, "y.npy", "No such file", __LINE__); /* golden: y.npy required */
    write_tensor(dir, "y.npy", 3, 2, 2, 5, 0);
    expect_refused(dir, 1, "y.npy", "(2, 2, 6)", __LINE__);

    new_case_dir(dir, sizeof dir); /* a weight with the wrong shape */
    write_mla_inputs(dir);
    write_tensor(dir, "w_uk.npy", 3, 5, 3, 5, 0);
    expect_refused(dir, 0, "w_uk.npy", "(5, 3, 4)", __LINE__);

    new_case_dir(dir, sizeof dir); /* a missing weight */
    write_mla_inputs(dir);
    char path[600];
    snprintf(path, sizeof path, "%s/w_o.npy", dir);
    unlink(path);
    expect_refused(dir, 0, "w_o.npy", "No such file", __LINE__);

    new_case_dir(dir, sizeof dir); /* an odd RoPE width */
    write_mla_inputs(dir);
    write_tensor(dir, "kpe.npy", 3, 2, 5, 3, 0);
    write_tensor(dir, "w_qr.npy", 3, 4, 3, 3, 0);
    expect_refused(dir, 0, "kpe.npy", "must be even", __LINE__);

    new_case_dir(dir, sizeof dir); /* more new tokens than cache entries */
    write_mla_inputs(dir);
    write_tensor(dir, "x.npy", 3, 2, 7, 6, 0);
    expect_refused(dir, 0, "Tq = 7", "Tq <= Tk", __LINE__);

    static const struct {
        const char *json, *phrase;
    } bad[] = {
        {"{\"window\": 4}", "unknown key 'window' for an MLA case"},
        {"{\"rope_theta\": -1}", "'rope_theta'"},
        {"{\"rope_theta\": \"1e4\"}", "'rope_theta'"},
        {"{\"causal\": 0}", "'causal'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        new_case_dir(dir, sizeof dir);
        write_mla_inputs(dir);
        write_text(dir, "case.json", bad[i].json);
        expect_refused(dir, 0, "case.json", bad[i].phrase, __LINE__);
    }
}

/* A golden paged decode case (stage 11): the pools, the int32 index files, Tk = the longest
 * sequence; and page_size is a key of paged cases only. */
static void test_paged_case(void)
{
    Case c;
    FlError err = {{0}};
    const char *golden = FLASHLAB_SOURCE_DIR "/golden/cases/paged_gqa_tq3";
    if (case_load(golden, 1, &c, &err) != FL_OK) {
        test_fail(__FILE__, __LINE__, "golden paged case refused: %s", err.msg);
    } else {
        const AttnProblem *p = &c.problem;
        EXPECT(c.is_paged && c.kind == &kind_attention && p->B == 3 && p->Hq == 8 && p->Hkv == 2 && p->Tq == 3);
        EXPECT(p->page_size == 8 && p->num_pages == 13 && p->max_pages == 7 && p->Tk == 41 && p->causal);
        EXPECT(p->seq_lens[0] == 3 && p->seq_lens[1] == 20 && p->seq_lens[2] == 41);
        EXPECT(p->block_table[0] >= 0 && p->block_table[1] == -1 && p->k == c.k.data);
        EXPECT(attn_k_numel(p) == (size_t)13 * 8 * 2 * 24 && (attn_required_features(p) & FEAT_PAGED));
        EXPECT(c.expected[OUT_O].data && c.expected[OUT_LSE].data && !c.expected[OUT_DQ].data);
        case_free(&c);
    }
    char dir[512];
    new_case_dir(dir, sizeof dir); /* a contiguous case with a page size */
    write_tensor(dir, "q.npy", 4, 1, 2, 3, 8);
    write_tensor(dir, "k.npy", 4, 1, 2, 5, 8);
    write_tensor(dir, "v.npy", 4, 1, 2, 5, 8);
    write_text(dir, "case.json", "{\"page_size\": 4}");
    expect_refused(dir, 0, "case.json", "unknown key 'page_size'", __LINE__);
}

int main(void)
{
    if (test_tmpdir_make(tmpdir, sizeof tmpdir, "test_case") != 0)
        return 2;
    test_good_case_defaults();
    test_good_case_options();
    test_expected_forward_only();
    test_bad_inputs();
    test_bad_case_json();
    test_mla_case();
    test_paged_case();
    test_tmpdir_remove(tmpdir);
    return test_exit_code("test_case");
}
