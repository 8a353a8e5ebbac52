/* fuzz_layouts.c — the header fields and files of the structured harnesses (fuzz_layouts.h). */
#include "fuzz_layouts.h"

const char *const fuzz_scale_text[FUZZ_SCALE_COUNT] = {"0.25", "1", "0.5",    "3",
                                                       "1e-3", "1e4", "1e20", "1e-30"};
const char *const fuzz_theta_text[FUZZ_THETA_COUNT] = {"10000", "500", "1", "1e6", "0.5", "3.5"};

/* ---- attention ------------------------------------------------------------------------------ */

const FuzzField fuzz_attention_fields[AT_COUNT] = {
    {"B", 1, 2},       {"Hkv", 1, 3},         {"group", 1, 3},   {"Tq", 1, 16},
    {"Tk", 1, 16},     {"d", 1, 12},          {"dv", 1, 12},     {"flags", 0, 255},
    {"window", 0, 20}, {"sink_tokens", 0, 20}, {"scale", 0, FUZZ_SCALE_COUNT - 1},
    {"defect", 0, 255}, {"defect file", 0, 255}, {"defect arg", 0, 255},
};

void fuzz_attention_layout(const int *v, FuzzFolder *x)
{
    const int64_t B = v[AT_B], Hkv = v[AT_HKV], Hq = Hkv * v[AT_GROUP], Tq = v[AT_TQ], Tk = v[AT_TK];
    const int64_t q[4] = {B, Hq, Tq, v[AT_D]}, k[4] = {B, Hkv, Tk, v[AT_D]};
    const int64_t val[4] = {B, Hkv, Tk, v[AT_DV]}, dout[4] = {B, Hq, Tq, v[AT_DV]}, sinks[1] = {Hq};
    x->count = 0;
    fuzz_folder_add(x, "q.npy", 4, q, NPY_FLOAT32, 1.0f);
    fuzz_folder_add(x, "k.npy", 4, k, NPY_FLOAT32, 1.0f);
    fuzz_folder_add(x, "v.npy", 4, val, NPY_FLOAT32, 1.0f);
    if (v[AT_FLAGS] & AT_DO)
        fuzz_folder_add(x, "do.npy", 4, dout, NPY_FLOAT32, 1.0f);
    if (v[AT_FLAGS] & AT_SINKS)
        fuzz_folder_add(x, "sinks.npy", 1, sinks, NPY_FLOAT32, 1.0f);
}

/* ---- paged decode --------------------------------------------------------------------------- */

const FuzzField fuzz_paged_fields[PG_COUNT] = {
    {"B", 1, FUZZ_PAGED_MAX_B}, {"Hkv", 1, 2},       {"group", 1, 4},      {"Tq", 1, 4},
    {"d", 1, 12},               {"dv", 1, 12},       {"page_size", 1, 8},  {"flags", 0, 255},
    {"window", 0, 16},          {"sink_tokens", 0, 8}, {"scale", 0, FUZZ_SCALE_COUNT - 1},
    {"extra pages", 0, 3},      {"extra width", 0, 2}, {"len0", 0, 30},    {"len1", 0, 30},
    {"len2", 0, 30},            {"defect", 0, 255},  {"defect file", 0, 255}, {"defect arg", 0, 255},
};

int fuzz_paged_len(const int *v, int b) { return v[PG_TQ] + v[PG_LEN0 + b]; }

int fuzz_paged_pages_of(const int *v, int b)
{
    return (fuzz_paged_len(v, b) + v[PG_PAGE] - 1) / v[PG_PAGE];
}

int fuzz_paged_pool(const int *v)
{
    int pages = v[PG_EXTRA_PAGES];
    for (int b = 0; b < v[PG_B]; b++)
        pages += fuzz_paged_pages_of(v, b);
    return pages;
}

int fuzz_paged_width(const int *v)
{
    int most = 0;
    for (int b = 0; b < v[PG_B]; b++)
        most = fuzz_paged_pages_of(v, b) > most ? fuzz_paged_pages_of(v, b) : most;
    return most + v[PG_EXTRA_WIDTH];
}

void fuzz_paged_layout(const int *v, FuzzFolder *x)
{
    const int64_t B = v[PG_B], Hkv = v[PG_HKV], Hq = Hkv * v[PG_GROUP], P = fuzz_paged_pool(v);
    const int64_t q[4] = {B, Hq, v[PG_TQ], v[PG_D]}, k[4] = {P, v[PG_PAGE], Hkv, v[PG_D]};
    const int64_t val[4] = {P, v[PG_PAGE], Hkv, v[PG_DV]}, sinks[1] = {Hq};
    const int64_t table[2] = {B, fuzz_paged_width(v)}, lens[1] = {B};
    x->count = 0;
    fuzz_folder_add(x, "q.npy", 4, q, NPY_FLOAT32, 1.0f);
    fuzz_folder_add(x, "k_pages.npy", 4, k, NPY_FLOAT32, 1.0f);
    fuzz_folder_add(x, "v_pages.npy", 4, val, NPY_FLOAT32, 1.0f);
    if (v[PG_FLAGS] & PG_SINKS)
        fuzz_folder_add(x, "sinks.npy", 1, sinks, NPY_FLOAT32, 1.0f);
    fuzz_folder_add(x, "block_table.npy", 2, table, NPY_INT32, 1.0f);
    fuzz_folder_add(x, "seq_lens.npy", 1, lens, NPY_INT32, 1.0f);
}

/* ---- MLA ------------------------------------------------------------------------------------ */

const FuzzField fuzz_mla_fields[ML_COUNT] = {
    {"B", 1, 2},  {"Tq", 1, 4},  {"extra keys", 0, 8}, {"D", 1, 8},  {"mq", 1, 8},
    {"H", 1, 3},  {"dh", 1, 8},  {"m", 1, 8},          {"p/2", 1, 3}, {"dv", 1, 8},
    {"flags", 0, 255}, {"theta", 0, FUZZ_THETA_COUNT - 1}, {"defect", 0, 255},
    {"defect file", 0, 255}, {"defect arg", 0, 255},
};

void fuzz_mla_layout(const int *v, FuzzFolder *x)
{
    const int64_t B = v[ML_B], Tq = v[ML_TQ], Tk = v[ML_TQ] + v[ML_EXTRA_KEYS], D = v[ML_D];
    const int64_t mq = v[ML_MQ], H = v[ML_H], dh = v[ML_DH], m = v[ML_M], p = 2 * v[ML_HALF_P];
    const int64_t dv = v[ML_DV];
    const int64_t shapes[9][3] = {{B, Tq, D},  {B, Tk, m},  {B, Tk, p},  {D, mq, 0}, {mq, H, dh},
                                  {mq, H, p},  {m, H, dh},  {m, H, dv},  {H, dv, D}};
    static const char *const names[9] = {"x.npy",    "ckv.npy",  "kpe.npy",  "w_dq.npy", "w_uq.npy",
                                         "w_qr.npy", "w_uk.npy", "w_uv.npy", "w_o.npy"};
    const int fan_in[9] = {1, 1, 1, (int)D, (int)mq, (int)mq, (int)m, (int)m, (int)(H * dv)};
    x->count = 0;
    for (int i = 0; i < 9; i++)
        fuzz_folder_add(x, names[i], i == 3 ? 2 : 3, shapes[i], NPY_FLOAT32, fuzz_fan_in_scale(fan_in[i]));
}
