/* fuzz_case_attention.c — libFuzzer harness: whole attention case folders (q, k, v, optional
 * do.npy, sinks.npy and case.json) built from the fuzz bytes, loaded by case_load and run on stage
 * 10's default CPU variant, forward and, with do.npy, backward.
 *
 * The bytes are read as: the header fields of fuzz_layouts.h (B <= 2, Hkv <= 3, Hq = group * Hkv,
 * Tq, Tk <= 16, d, dv <= 12; causal, window, sink tokens, scale, which files are present, whether
 * NaN/Inf/huge values may appear, one optional file defect), the run options (SRAM size, tile
 * sizes), then one byte per element of q, k, v, do, sinks (fuzz_value).
 *
 * Checked: a damaged file (cut short, a trailing byte, the wrong dtype, a size of 0) is refused
 * with FL_BAD_INPUT and one printable line; any refusal looks like that; an accepted case runs,
 * and its outputs follow the rule of fuzz_check.h against tests/test_support.c's float64
 * reference (o, lse, dq, dk, dv, dsinks). */
#include <stdint.h>
#include <stdio.h>

#include "fuzz_layouts.h"
#include "fuzz_support.h"

static void write_options(const char *dir, const int *v)
{
    const int flags = v[AT_FLAGS], mask = flags & AT_MASK_KEYS;
    char window[16], sink_tokens[16];
    snprintf(window, sizeof window, "%d", v[AT_WINDOW]);
    snprintf(sink_tokens, sizeof sink_tokens, "%d", v[AT_SINK_TOKENS]);
    const char *const keys[] = {"causal", "window", "sink_tokens", "scale", "description"};
    const char *const values[] = {flags & AT_CAUSAL ? "true" : "false", mask ? window : NULL,
                                  mask ? sink_tokens : NULL,
                                  flags & AT_SCALE_KEY ? fuzz_scale_text[v[AT_SCALE]] : NULL,
                                  flags & AT_DESCRIPTION ? "\"fuzzed attention case\"" : NULL};
    fuzz_write_case_json(dir, keys, values, 5);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_set_name("fuzz_case_attention");
    FuzzBytes in;
    fuzz_bytes_init(&in, data, size);
    int v[AT_COUNT];
    fuzz_fields_read(&in, fuzz_attention_fields, AT_COUNT, v);
    FuzzRunOptions run;
    fuzz_read_run_options(&in, &run);

    FuzzFolder x;
    fuzz_attention_layout(v, &x);
    const int defect = fuzz_defect_of(v[AT_DEFECT], FUZZ_DEFECT_COUNT);
    const int target = v[AT_DEFECT_FILE] % x.count;
    int must_refuse = defect != FUZZ_INTACT && defect != FUZZ_SHAPE;
    if (defect == FUZZ_SHAPE)
        must_refuse = fuzz_folder_reshape(&x, target, v[AT_DEFECT_ARG]);
    fuzz_folder_fill(&x, &in, v[AT_FLAGS] & AT_SPECIALS);

    const char *dir = fuzz_scratch("attention");
    fuzz_clear_case_files(dir);
    fuzz_folder_write(&x, dir);
    if (v[AT_FLAGS] & AT_JSON)
        write_options(dir, v);
    if (must_refuse && defect != FUZZ_SHAPE)
        fuzz_damage_file(dir, x.file[target].name, (FuzzDefect)defect, x.file[target].dtype, v[AT_DEFECT_ARG]);
    Case c;
    if (fuzz_load(dir, must_refuse, x.file[target].name, &c)) {
        fuzz_run_case(&c, &run);
        case_free(&c);
    }
    fuzz_folder_free(&x);
    return 0;
}
