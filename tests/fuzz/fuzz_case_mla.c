/* fuzz_case_mla.c — libFuzzer harness: whole MLA case folders (x, ckv, kpe and the six weights,
 * optional case.json with causal, rope_theta, description) built from the fuzz bytes, loaded by
 * case_load and run on stage 09's default CPU variant (the absorbed form).
 *
 * The bytes are read as: the header fields of fuzz_layouts.h (B <= 2, Tq <= 4, Tk = Tq + 0..8,
 * D, mq, dh, m, dv <= 8, H <= 3, p = 2, 4 or 6; causal, rope_theta; whether NaN/Inf/huge values
 * may appear; one optional defect), the run options (SRAM, tiles), then one byte per element of
 * each file in the order above; the weights are scaled by about 1/sqrt(fan-in) so that y stays
 * of size about 1, as in the golden cases.
 *
 * Checked: a damaged folder is refused with FL_BAD_INPUT and one printable line (a file cut short,
 * a trailing byte, the wrong dtype, a size of 0, an odd RoPE width p, more new tokens than cache
 * entries, a key MLA cases do not have); an accepted one loads as the problem written (sizes,
 * causal, rope_theta, scale) and runs, and y follows fuzz_check.h's rule against the float64
 * reference of tests/test_support_mla.c (ref_mla). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_layouts.h"
#include "fuzz_support.h"
#include "kind_mla.h"

/* Defects of an MLA folder beyond the file defects of fuzz_support.h; all must be refused. */
enum { ML_ODD_P = FUZZ_DEFECT_COUNT, ML_TQ_ABOVE_TK, ML_BAD_KEY, ML_DEFECT_KINDS };

static void write_options(const char *dir, const int *v, int bad_key)
{
    const int flags = v[ML_FLAGS];
    const char *const keys[] = {"causal", "rope_theta", "description", "scale"};
    const char *const values[] = {flags & ML_CAUSAL ? "true" : "false",
                                  flags & ML_THETA_KEY ? fuzz_theta_text[v[ML_THETA]] : NULL,
                                  flags & ML_DESCRIPTION ? "\"fuzzed MLA case\"" : NULL,
                                  bad_key ? "0.5" : NULL};
    fuzz_write_case_json(dir, keys, values, 4);
}

/* The MLA defects that change shapes (before the values are drawn); returns what they damage. */
static const char *mla_defect(FuzzFolder *x, int defect, int arg)
{
    if (defect == ML_ODD_P) { /* p one less on both files that hold it: kpe and w_qr */
        x->file[fuzz_folder_find(x, "kpe.npy")].shape[2] -= 1;
        x->file[fuzz_folder_find(x, "w_qr.npy")].shape[2] -= 1;
        return "kpe.npy (odd RoPE width)";
    }
    if (defect == ML_TQ_ABOVE_TK) {
        FuzzFile *xf = &x->file[fuzz_folder_find(x, "x.npy")];
        xf->shape[1] = x->file[fuzz_folder_find(x, "ckv.npy")].shape[1] + 1 + arg % 3;
        return "x.npy (Tq > Tk)";
    }
    return "case.json (a key MLA cases do not have)";
}

/* The loaded problem must be the one written: the sizes of the files, causal and rope_theta as
 * the case.json gave them (not causal and 10000 without one), scale 1/sqrt(dh + p). */
static void expect_written(const Case *c, const FuzzFolder *x, const int *v)
{
    const MlaProblem *p = mla_case_problem(c);
    const int64_t *xs = x->file[MLA_X].shape, *ckv = x->file[MLA_CKV].shape, *uq = x->file[MLA_W_UQ].shape;
    const int json = v[ML_FLAGS] & ML_JSON, causal = json && (v[ML_FLAGS] & ML_CAUSAL);
    const char *theta = json && (v[ML_FLAGS] & ML_THETA_KEY) ? fuzz_theta_text[v[ML_THETA]] : "10000";
    const int p_width = (int)x->file[MLA_KPE].shape[2], dh = (int)uq[2];
    if (!p || p->B != xs[0] || p->Tq != xs[1] || p->D != xs[2] || p->Tk != ckv[1] || p->m != ckv[2] ||
        p->H != uq[1] || p->dh != dh || p->p != p_width || p->mq != x->file[MLA_W_DQ].shape[1] ||
        p->dv != x->file[MLA_W_UV].shape[2])
        fuzz_fail("the loaded MLA problem's sizes are not those of the files written");
    if (p->causal != causal || p->rope_theta != strtof(theta, NULL) ||
        p->scale != (float)(1.0 / sqrt((double)(dh + p_width))))
        fuzz_fail("the loaded MLA options (causal %d, rope_theta %g, scale %g) are not those written "
                  "(causal %d, rope_theta %s, scale 1/sqrt(%d))",
                  p->causal, p->rope_theta, p->scale, causal, theta, dh + p_width);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_set_name("fuzz_case_mla");
    FuzzBytes in;
    fuzz_bytes_init(&in, data, size);
    int v[ML_COUNT];
    fuzz_fields_read(&in, fuzz_mla_fields, ML_COUNT, v);
    FuzzRunOptions run;
    fuzz_read_run_options(&in, &run);

    FuzzFolder x;
    fuzz_mla_layout(v, &x);
    const int defect = fuzz_defect_of(v[ML_DEFECT], ML_DEFECT_KINDS);
    const int target = v[ML_DEFECT_FILE] % x.count, arg = v[ML_DEFECT_ARG];
    int must_refuse = defect != FUZZ_INTACT && defect != FUZZ_SHAPE;
    const char *damaged = x.file[target].name;
    if (defect == FUZZ_SHAPE)
        must_refuse = fuzz_folder_reshape(&x, target, arg);
    if (defect >= FUZZ_DEFECT_COUNT)
        damaged = mla_defect(&x, defect, arg);
    fuzz_folder_fill(&x, &in, v[ML_FLAGS] & ML_SPECIALS);

    const char *dir = fuzz_scratch("mla");
    fuzz_clear_case_files(dir);
    fuzz_folder_write(&x, dir);
    if ((v[ML_FLAGS] & ML_JSON) || defect == ML_BAD_KEY)
        write_options(dir, v, defect == ML_BAD_KEY);
    if (must_refuse && defect < FUZZ_SHAPE)
        fuzz_damage_file(dir, damaged, (FuzzDefect)defect, x.file[target].dtype, arg);
    Case c;
    if (fuzz_load(dir, must_refuse, damaged, &c)) {
        expect_written(&c, &x, v);
        fuzz_run_case(&c, &run);
        case_free(&c);
    }
    fuzz_folder_free(&x);
    return 0;
}
