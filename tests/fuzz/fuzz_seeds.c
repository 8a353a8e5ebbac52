/* fuzz_seeds.c — writes the seed corpora of the fuzzers from the committed golden cases.
 *
 *   fuzz_seeds GOLDEN_DIR OUT_DIR
 *
 * writes, under OUT_DIR:
 *   npy/             every golden .npy file of at most 8 KiB, as it is
 *   case_json/       every golden case.json, after one byte that picks the folder kind the
 *                    harness copies it into ('0' attention, '1' paged, '2' MLA)
 *   case_attention/  each attention, paged and MLA golden case in the byte layout of its
 *   case_paged/      structured harness (fuzz_layouts.h): its sizes and options as header fields
 *   case_mla/        (clamped to the harness's small ranges), then its values rounded to the
 *                    fuzz grid, as many as the clamped shapes hold
 * CTest runs it before the fuzzers (tests/fuzz/CMakeLists.txt); nothing it writes is committed. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "case.h"
#include "fuzz_layouts.h"
#include "kind_mla.h"

enum { MAX_SEED = 1 << 16, NPY_SEED_LIMIT = 8192 };

static const char *out_root;

static void write_seed(const char *corpus, const char *name, const uint8_t *data, size_t n)
{
    char dir[4096];
    fuzz_path(dir, out_root, corpus);
    mkdir(dir, 0755);
    fuzz_write_bytes(dir, name, data, n);
}

static size_t read_file(const char *path, uint8_t *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    const size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

/* ---- npy and case.json seeds: the golden files as they are ---------------------------------- */

static void npy_seeds(const char *case_dir, const char *case_name)
{
    static uint8_t buf[NPY_SEED_LIMIT + 1];
    DIR *d = opendir(case_dir);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        const size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".npy") != 0)
            continue;
        char path[4096], name[600];
        fuzz_path(path, case_dir, e->d_name);
        const size_t n = read_file(path, buf, sizeof buf);
        snprintf(name, sizeof name, "%s__%s", case_name, e->d_name);
        if (n > 0 && n <= NPY_SEED_LIMIT)
            write_seed("npy", name, buf, n);
    }
    if (d)
        closedir(d);
}

static void json_seed(const char *case_dir, const char *case_name, char kind)
{
    static uint8_t buf[MAX_SEED];
    char path[4096];
    fuzz_path(path, case_dir, "case.json");
    buf[0] = kind;
    const size_t n = read_file(path, buf + 1, sizeof buf - 1);
    if (n > 0)
        write_seed("case_json", case_name, buf, n + 1);
}

/* ---- structured seeds ------------------------------------------------------------------------ */

/* The index of the entry of texts (numbers in JSON) nearest x. */
static int nearest(const char *const *texts, int n, double x)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (fabs(log(strtod(texts[i], NULL) / x)) < fabs(log(strtod(texts[best], NULL) / x)))
            best = i;
    return best;
}

/* header bytes, four zero bytes of run options (defaults), then the golden values of each file
 * of the layout the harness builds from that header, rounded to the grid. */
static void structured_seed(const char *corpus, const char *name, const FuzzField *fields, int count,
                            const int *v, void (*layout)(const int *, FuzzFolder *),
                            const Tensor *(*tensor_of)(const Case *, const char *), const Case *c)
{
    static uint8_t buf[MAX_SEED];
    size_t n = (size_t)count + 4;
    fuzz_fields_write(fields, count, v, buf);
    memset(buf + count, 0, 4);
    FuzzBytes in;
    int back[32];
    fuzz_bytes_init(&in, buf, (size_t)count);
    fuzz_fields_read(&in, fields, count, back);
    FuzzFolder x;
    layout(back, &x);
    for (int f = 0; f < x.count; f++) {
        const Tensor *t = x.file[f].dtype == NPY_FLOAT32 ? tensor_of(c, x.file[f].name) : NULL;
        const size_t have = t && t->data ? tensor_numel(t) : 0;
        for (size_t e = 0; t && e < fuzz_file_numel(&x.file[f]) && n < sizeof buf; e++)
            buf[n++] = fuzz_byte_for(e < have ? t->data[e] / x.file[f].scale : 0.0f);
    }
    write_seed(corpus, name, buf, n);
}

static const Tensor *attention_tensor(const Case *c, const char *file)
{
    static const char *const names[] = {"q.npy", "k.npy", "v.npy", "do.npy", "sinks.npy",
                                        "k_pages.npy", "v_pages.npy"};
    const Tensor *tensors[] = {&c->q, &c->k, &c->v, &c->dout, &c->sinks, &c->k, &c->v};
    for (int i = 0; i < 7; i++)
        if (strcmp(file, names[i]) == 0)
            return tensors[i];
    return NULL;
}

static const Tensor *mla_tensor(const Case *c, const char *file)
{
    for (int id = 0; id < MLA_INPUT_COUNT; id++)
        if (strcmp(file, mla_file_name(id)) == 0)
            return mla_case_input(c, id);
    return NULL;
}

static void attention_seed(const char *name, const Case *c)
{
    const AttnProblem *p = &c->problem;
    int v[AT_COUNT] = {p->B, p->Hkv, p->Hq / p->Hkv, p->Tq, p->Tk, p->d, p->dv, AT_JSON | AT_MASK_KEYS,
                       p->window, p->sink_tokens, nearest(fuzz_scale_text, FUZZ_SCALE_COUNT, p->scale),
                       0, 0, 0};
    v[AT_FLAGS] |= (p->causal ? AT_CAUSAL : 0) | (p->dout ? AT_DO : 0) | (p->sinks ? AT_SINKS : 0) |
                   (c->has_scale ? AT_SCALE_KEY : 0);
    structured_seed("case_attention", name, fuzz_attention_fields, AT_COUNT, v, fuzz_attention_layout,
                    attention_tensor, c);
}

static void paged_seed(const char *name, const Case *c)
{
    const AttnProblem *p = &c->problem;
    int v[PG_COUNT] = {p->B, p->Hkv, p->Hq / p->Hkv, p->Tq, p->d, p->dv, p->page_size,
                       PG_JSON | PG_PAGE_SIZE_KEY, p->window, p->sink_tokens,
                       nearest(fuzz_scale_text, FUZZ_SCALE_COUNT, p->scale), 2, 1, 0, 0, 0, 0, 0, 0};
    v[PG_FLAGS] |= (p->causal ? PG_CAUSAL : 0) | (p->sinks ? PG_SINKS : 0) | (c->has_scale ? PG_SCALE_KEY : 0);
    for (int b = 0; b < FUZZ_PAGED_MAX_B && b < p->B; b++)
        v[PG_LEN0 + b] = p->seq_lens[b] - p->Tq;
    structured_seed("case_paged", name, fuzz_paged_fields, PG_COUNT, v, fuzz_paged_layout,
                    attention_tensor, c);
}

static void mla_seed(const char *name, const Case *c)
{
    const MlaProblem *p = mla_case_problem(c);
    int v[ML_COUNT] = {p->B, p->Tq, p->Tk - p->Tq, p->D, p->mq, p->H, p->dh, p->m, p->p / 2, p->dv,
                       ML_JSON | ML_THETA_KEY | (p->causal ? ML_CAUSAL : 0),
                       nearest(fuzz_theta_text, FUZZ_THETA_COUNT, p->rope_theta), 0, 0, 0};
    structured_seed("case_mla", name, fuzz_mla_fields, ML_COUNT, v, fuzz_mla_layout, mla_tensor, c);
}

static void case_seeds(const char *case_dir, const char *name)
{
    Case c;
    FlError err = {{0}};
    npy_seeds(case_dir, name);
    if (case_load(case_dir, 0, &c, &err) != FL_OK)
        return;
    const int mla = mla_case_problem(&c) != NULL;
    json_seed(case_dir, name, mla ? '2' : c.is_paged ? '1' : '0');
    if (mla)
        mla_seed(name, &c);
    else if (c.is_paged)
        paged_seed(name, &c);
    else
        attention_seed(name, &c);
    case_free(&c);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: fuzz_seeds GOLDEN_DIR OUT_DIR\n");
        return 2;
    }
    fuzz_set_name("fuzz_seeds");
    out_root = argv[2];
    mkdir(out_root, 0755);
    DIR *d = opendir(argv[1]);
    if (!d) {
        fprintf(stderr, "fuzz_seeds: cannot read %s\n", argv[1]);
        return 2;
    }
    int cases = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char dir[4096];
        if (e->d_name[0] == '.')
            continue;
        fuzz_path(dir, argv[1], e->d_name);
        case_seeds(dir, e->d_name);
        cases++;
    }
    closedir(d);
    printf("fuzz_seeds: seeds from %d golden cases in %s\n", cases, out_root);
    return cases > 0 ? 0 : 1;
}
