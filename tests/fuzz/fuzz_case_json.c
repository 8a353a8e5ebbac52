/* fuzz_case_json.c — libFuzzer harness of case.json: how the loader reads the options of each
 * case kind, and what a stage then makes of them.
 *
 * The first fuzz byte picks one of three small golden case folders, copied once into this
 * process's scratch folder: an attention case with do.npy and sinks.npy (window_sinks), a paged
 * decode case (paged_window_sink_tokens) or an MLA case (mla_odd_sizes). The other bytes become
 * that folder's case.json. case_load must refuse it with FL_BAD_INPUT and one printable line, or
 * accept it; an accepted case runs on the default CPU variant of its stage (10, 11 or 09; forward
 * and backward for the attention case) and every output is compared with the float64 reference
 * at the float32 tolerance (fuzz_check.h). The golden folders are found under
 * FLASHLAB_SOURCE_DIR/golden/cases, or under $FLASHLAB_GOLDEN_DIR when that is set. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_support.h"

enum { KIND_COUNT = 3 };
static const char *const golden_case[KIND_COUNT] = {"window_sinks", "paged_window_sink_tokens",
                                                    "mla_odd_sizes"};
/* The input files of each folder (expected outputs are left behind). */
static const char *const inputs[KIND_COUNT][10] = {
    {"q.npy", "k.npy", "v.npy", "do.npy", "sinks.npy"},
    {"q.npy", "k_pages.npy", "v_pages.npy", "block_table.npy", "seq_lens.npy"},
    {"x.npy", "ckv.npy", "kpe.npy", "w_dq.npy", "w_uq.npy", "w_qr.npy", "w_uk.npy", "w_uv.npy", "w_o.npy"},
};

static const char *golden_root(void)
{
    const char *dir = getenv("FLASHLAB_GOLDEN_DIR");
    return dir && dir[0] ? dir : FLASHLAB_SOURCE_DIR "/golden/cases";
}

static void copy_file(const char *from, const char *to_dir, const char *name)
{
    FILE *f = fopen(from, "rb");
    if (!f)
        fuzz_fail("cannot read the golden file %s", from);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (size_t n = 1; n > 0; len += n) {
        if (len == cap && !(buf = realloc(buf, cap = cap ? 2 * cap : 65536)))
            fuzz_fail("out of memory copying %s", from);
        n = fread(buf + len, 1, cap - len, f);
    }
    fclose(f);
    fuzz_write_bytes(to_dir, name, buf, len);
    free(buf);
}

/* scratch/<kind>/ with the golden inputs of that kind, made on the first call. */
static const char *case_folder(int kind)
{
    static char dirs[KIND_COUNT][4096];
    if (dirs[kind][0])
        return dirs[kind];
    fuzz_path(dirs[kind], fuzz_scratch("json"), golden_case[kind]);
    if (mkdir(dirs[kind], 0700) != 0)
        fuzz_fail("cannot make %s", dirs[kind]);
    for (int i = 0; i < 10 && inputs[kind][i]; i++) {
        char from[4096], golden[4096];
        fuzz_path(golden, golden_root(), golden_case[kind]);
        fuzz_path(from, golden, inputs[kind][i]);
        copy_file(from, dirs[kind], inputs[kind][i]);
    }
    return dirs[kind];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_set_name("fuzz_case_json");
    if (size == 0)
        return 0;
    const char *dir = case_folder(data[0] % KIND_COUNT);
    fuzz_write_bytes(dir, "case.json", data + 1, size - 1);
    Case c;
    if (!fuzz_load(dir, 0, "case.json", &c))
        return 0;
    const FuzzRunOptions defaults = {0, 0, 0, 0};
    fuzz_run_case(&c, &defaults);
    case_free(&c);
    return 0;
}
