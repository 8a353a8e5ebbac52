/* fuzz_layouts.h — the header fields and the files of each structured harness: attention
 * (fuzz_case_attention), paged decode (fuzz_case_paged) and MLA (fuzz_case_mla). Shared by the
 * harnesses and the seed writer (fuzz_seeds.c), which is why they live apart from the harnesses.
 * Sizes are kept small so that one input runs in milliseconds under the sanitizers. */
#ifndef FLASHLAB_FUZZ_LAYOUTS_H
#define FLASHLAB_FUZZ_LAYOUTS_H

#include "fuzz_folder.h"

/* The scales a case.json may name ("scale"), and MLA's rope_theta values, as JSON text. */
enum { FUZZ_SCALE_COUNT = 8, FUZZ_THETA_COUNT = 6 };
extern const char *const fuzz_scale_text[FUZZ_SCALE_COUNT];
extern const char *const fuzz_theta_text[FUZZ_THETA_COUNT];

/* ---- attention: q, k, v, [do], [sinks] ------------------------------------------------------- */

enum {
    AT_B, AT_HKV, AT_GROUP, AT_TQ, AT_TK, AT_D, AT_DV, AT_FLAGS, AT_WINDOW, AT_SINK_TOKENS,
    AT_SCALE, AT_DEFECT, AT_DEFECT_FILE, AT_DEFECT_ARG, AT_COUNT
};
enum {
    AT_CAUSAL = 1, AT_DO = 2, AT_SINKS = 4, AT_JSON = 8, AT_SCALE_KEY = 16, AT_SPECIALS = 32,
    AT_MASK_KEYS = 64, /* window and sink_tokens written into case.json */
    AT_DESCRIPTION = 128
};
extern const FuzzField fuzz_attention_fields[AT_COUNT];
void fuzz_attention_layout(const int *v, FuzzFolder *x);

/* ---- paged decode: q, k_pages, v_pages, [sinks], block_table, seq_lens ----------------------- */

enum { FUZZ_PAGED_MAX_B = 3 };
enum {
    PG_B, PG_HKV, PG_GROUP, PG_TQ, PG_D, PG_DV, PG_PAGE, PG_FLAGS, PG_WINDOW, PG_SINK_TOKENS,
    PG_SCALE, PG_EXTRA_PAGES, PG_EXTRA_WIDTH, PG_LEN0, PG_LEN1, PG_LEN2, PG_DEFECT, PG_DEFECT_FILE,
    PG_DEFECT_ARG, PG_COUNT
};
enum {
    PG_CAUSAL = 1, PG_SINKS = 2, PG_JSON = 4, PG_SCALE_KEY = 8, PG_SPECIALS = 16,
    PG_PAGE_SIZE_KEY = 32, /* page_size written into case.json */
    PG_JUNK_TABLE = 64,    /* table entries past a sequence's pages hold junk instead of -1 */
    PG_FINITE_UNUSED = 128 /* slots no sequence uses hold finite values instead of NaN */
};
extern const FuzzField fuzz_paged_fields[PG_COUNT];
/* The keys of sequence b: Tq + the PG_LEN field of b. */
int fuzz_paged_len(const int *v, int b);
/* Pages sequence b uses, pages in the pool, entries per table row. */
int fuzz_paged_pages_of(const int *v, int b);
int fuzz_paged_pool(const int *v);
int fuzz_paged_width(const int *v);
void fuzz_paged_layout(const int *v, FuzzFolder *x);

/* ---- MLA: x, ckv, kpe, w_dq, w_uq, w_qr, w_uk, w_uv, w_o -------------------------------------- */

enum {
    ML_B, ML_TQ, ML_EXTRA_KEYS, ML_D, ML_MQ, ML_H, ML_DH, ML_M, ML_HALF_P, ML_DV, ML_FLAGS,
    ML_THETA, ML_DEFECT, ML_DEFECT_FILE, ML_DEFECT_ARG, ML_COUNT
};
enum { ML_CAUSAL = 1, ML_JSON = 2, ML_SPECIALS = 4, ML_THETA_KEY = 8, ML_DESCRIPTION = 16 };
extern const FuzzField fuzz_mla_fields[ML_COUNT];
/* The weights are scaled by fuzz_fan_in_scale of their fan-in, so y stays of size about 1. */
void fuzz_mla_layout(const int *v, FuzzFolder *x);

#endif
