/* fuzz_case_paged.c — libFuzzer harness: whole paged decode case folders (q, k_pages, v_pages,
 * int32 block_table and seq_lens, optional sinks.npy and case.json with page_size) built from the
 * fuzz bytes, loaded by case_load and run on stage 11's CPU implementation.
 *
 * The bytes are read as: the header fields of fuzz_layouts.h (B <= 3 sequences of Tq + 0..30
 * keys, page sizes 1..8, up to 3 pages no sequence uses, table rows up to 2 entries wider than
 * needed; mask options, scale, sinks; whether unused slots hold NaN or numbers, whether unused
 * table entries hold -1 or junk; one optional defect), the run options (SRAM, tiles, splits), one
 * byte per element of q, k_pages, v_pages, sinks, then the order the pages are handed out in.
 *
 * Checked: a damaged folder is refused with FL_BAD_INPUT and one printable line (a file cut short,
 * a trailing byte, the wrong dtype, a size of 0, a used table entry outside the pool, a sequence
 * shorter than Tq or longer than its table row, a page_size that disagrees with k_pages.npy, a
 * do.npy); an accepted one runs, and o, lse follow fuzz_check.h's rule against the float64
 * reference computed per sequence on its gathered keys (tests/test_support_paged.c). Slots no
 * sequence uses do not count as inputs: a NaN there must not reach any output. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_layouts.h"
#include "fuzz_support.h"

/* Defects of a paged folder beyond the file defects of fuzz_support.h; all must be refused. */
enum { PG_BAD_ENTRY = FUZZ_DEFECT_COUNT, PG_BAD_LEN, PG_BAD_PAGE_SIZE, PG_WITH_DO, PG_DEFECT_KINDS };

static void write_options(const char *dir, const int *v, int page_size, int with_page_size)
{
    const int flags = v[PG_FLAGS] | (with_page_size ? PG_PAGE_SIZE_KEY : 0);
    char window[16], sink_tokens[16], page[16];
    snprintf(window, sizeof window, "%d", v[PG_WINDOW]);
    snprintf(sink_tokens, sizeof sink_tokens, "%d", v[PG_SINK_TOKENS]);
    snprintf(page, sizeof page, "%d", page_size);
    const char *const keys[] = {"causal", "window", "sink_tokens", "scale", "page_size"};
    const char *const values[] = {flags & PG_CAUSAL ? "true" : "false", window, sink_tokens,
                                  flags & PG_SCALE_KEY ? fuzz_scale_text[v[PG_SCALE]] : NULL,
                                  flags & PG_PAGE_SIZE_KEY ? page : NULL};
    fuzz_write_case_json(dir, keys, values, 5);
}

/* The pages in the order they are handed out: a shuffle of 0..P-1 driven by the fuzz bytes. */
static void page_order(FuzzBytes *in, int *order, int P)
{
    for (int i = 0; i < P; i++)
        order[i] = i;
    for (int i = P - 1; i > 0; i--) {
        const int j = fuzz_byte(in) % (i + 1), t = order[i];
        order[i] = order[j], order[j] = t;
    }
}

/* block_table and seq_lens, the sequences' pages taken from `order` in turn; unused entries -1
 * or junk. */
static void fill_table(FuzzFolder *x, const int *v, const int *order, FuzzBytes *in)
{
    FuzzFile *table = &x->file[fuzz_folder_find(x, "block_table.npy")];
    FuzzFile *lens = &x->file[fuzz_folder_find(x, "seq_lens.npy")];
    int32_t *t = fuzz_file_int32(table), *n = fuzz_file_int32(lens);
    const int rows = (int)table->shape[0], width = (int)table->shape[1];
    for (int b = 0; b < (int)lens->shape[0]; b++) /* a FUZZ_SHAPE defect may add a row */
        n[b] = fuzz_paged_len(v, b < v[PG_B] ? b : 0);
    for (int b = 0, next = 0; b < rows; b++) {
        const int used = b < v[PG_B] ? fuzz_paged_pages_of(v, b) : 0;
        for (int i = 0; i < width; i++) {
            const int junk = (v[PG_FLAGS] & PG_JUNK_TABLE) ? (int)fuzz_byte(in) * 1000 - 7 : -1;
            t[(size_t)b * width + i] = i < used ? order[next++] : junk;
        }
    }
}

/* Slots no sequence uses: NaN, unless the flags ask for numbers there. */
static void poison_unused(FuzzFolder *x, const int *v, const int *order)
{
    if (v[PG_FLAGS] & PG_FINITE_UNUSED)
        return;
    const int page = v[PG_PAGE], P = fuzz_paged_pool(v);
    char *used = calloc((size_t)P * page + 1, 1);
    for (int b = 0, next = 0; used && b < v[PG_B]; b++)
        for (int j = 0; j < fuzz_paged_len(v, b); j += page, next++)
            for (int s = 0; s < page && j + s < fuzz_paged_len(v, b); s++)
                used[(size_t)order[next] * page + s] = 1;
    for (int f = 1; used && f <= 2; f++) { /* k_pages, v_pages */
        FuzzFile *pool = &x->file[f];
        const size_t width = (size_t)pool->shape[2] * pool->shape[3];
        for (size_t slot = 0; slot < (size_t)P * page && slot < (size_t)pool->shape[0] * pool->shape[1]; slot++)
            for (size_t e = 0; !used[slot] && e < width; e++)
                pool->data[slot * width + e] = NAN;
    }
    free(used);
}

/* The paged defects that change the table or the options; returns the name of what was damaged. */
static const char *paged_defect(FuzzFolder *x, int defect, int arg, const char *dir, int *page_size)
{
    int32_t *t = fuzz_file_int32(&x->file[fuzz_folder_find(x, "block_table.npy")]);
    int32_t *n = fuzz_file_int32(&x->file[fuzz_folder_find(x, "seq_lens.npy")]);
    if (defect == PG_BAD_ENTRY) {
        t[0] = arg & 1 ? -1 - arg : (int32_t)x->file[1].shape[0] + arg / 2; /* entry 0 is always used */
        return "block_table.npy";
    }
    if (defect == PG_BAD_LEN) {
        const int capacity = (int)(x->file[1].shape[1] * x->file[fuzz_folder_find(x, "block_table.npy")].shape[1]);
        n[0] = arg & 1 ? (int32_t)x->file[0].shape[2] - 1 - arg / 2 : capacity + 1 + arg / 2;
        return "seq_lens.npy";
    }
    if (defect == PG_BAD_PAGE_SIZE) {
        *page_size += 1 + arg % 5;
        return "case.json";
    }
    const float one = 1.0f;
    const int64_t shape[1] = {1};
    fuzz_write_npy(dir, "do.npy", &one, 1, shape, NPY_FLOAT32);
    return "do.npy (a paged case has no backward)";
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_set_name("fuzz_case_paged");
    FuzzBytes in;
    fuzz_bytes_init(&in, data, size);
    int v[PG_COUNT];
    fuzz_fields_read(&in, fuzz_paged_fields, PG_COUNT, v);
    FuzzRunOptions run;
    fuzz_read_run_options(&in, &run);

    FuzzFolder x;
    fuzz_paged_layout(v, &x);
    const int defect = fuzz_defect_of(v[PG_DEFECT], PG_DEFECT_KINDS);
    const int target = v[PG_DEFECT_FILE] % x.count, arg = v[PG_DEFECT_ARG];
    int must_refuse = defect != FUZZ_INTACT && defect != FUZZ_SHAPE;
    if (defect == FUZZ_SHAPE)
        must_refuse = fuzz_folder_reshape(&x, target, arg);
    fuzz_folder_fill(&x, &in, v[PG_FLAGS] & PG_SPECIALS);
    int order[64 * FUZZ_PAGED_MAX_B];
    page_order(&in, order, fuzz_paged_pool(v));
    fill_table(&x, v, order, &in);
    poison_unused(&x, v, order);

    const char *dir = fuzz_scratch("paged");
    fuzz_clear_case_files(dir);
    int page_size = v[PG_PAGE];
    const char *damaged = x.file[target].name;
    if (defect >= FUZZ_DEFECT_COUNT)
        damaged = paged_defect(&x, defect, arg, dir, &page_size);
    fuzz_folder_write(&x, dir);
    if ((v[PG_FLAGS] & PG_JSON) || defect == PG_BAD_PAGE_SIZE)
        write_options(dir, v, page_size, defect == PG_BAD_PAGE_SIZE);
    if (must_refuse && defect < FUZZ_SHAPE)
        fuzz_damage_file(dir, damaged, (FuzzDefect)defect, x.file[target].dtype, arg);
    Case c;
    if (fuzz_load(dir, must_refuse, damaged, &c)) {
        fuzz_run_case(&c, &run);
        case_free(&c);
    }
    fuzz_folder_free(&x);
    return 0;
}
