/* test_tc_planted_bug.c — stage 12's bf16 tolerance is loose enough for bf16 rounding and still
 * tight enough to catch a bug: the CPU reference of the tensor-core arithmetic passes every golden
 * case it runs, and the same reference with a bug planted fails them.
 *
 * The bugs are the reference itself (stages/12_tensor_cores/reference.c) compiled a second and a
 * third time into this executable only (tests/tc_planted_bug.cmake), with TC_PLANTED_BUG set and
 * its registry array renamed:
 *   1  no rescale   the forward never multiplies O and l by alpha = exp2(m_old - m_new) when a
 *                   later key tile raises a row's maximum. A row whose keys fit in one tile
 *                   (64) never rescales anything, so the bug is invisible there: the check must
 *                   fail on every case with a row that sees more than 64 keys, and pass the others.
 *   2  no D         the backward computes dS = P ∘ dP instead of P ∘ (dP - D): dq and dk are
 *                   wrong wherever D = rowsum(dO ∘ O) is not ~0. The check must fail on every case
 *                   with do.npy; the forward outputs are the correct ones.
 * Each comparison is the one `flashlab check` makes (check_tensor at check_tolerance(bf16, ...)),
 * against the float64 golden files. The failing tensors are printed as `flashlab check` prints
 * them. Exit 0 when every expectation holds. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case.h"
#include "kind.h"
#include "check.h"
#include "runner.h"
#include "test_support.h"

#include "../stages/12_tensor_cores/tiles.h"

extern const StageImpl *const tc_planted_bug_1_cpu[]; /* reference.c, TC_PLANTED_BUG = 1 */
extern const StageImpl *const tc_planted_bug_2_cpu[]; /* reference.c, TC_PLANTED_BUG = 2 */

typedef struct {
    const char *label;
    const StageImpl *impl;
} Run;

/* Runs impl on the case (forward + backward when it has do.npy) and compares every output with
 * the expected file at the bf16 tolerance; returns the number of failing tensors, or -1 when the
 * run itself failed. print_failures: check_print of each failing tensor. */
static int failing_tensors(const Run *run, Case *c, int print_failures)
{
    const AttnProblem *p = &c->problem;
    Tensor out[OUT_COUNT];
    float **slot[OUT_COUNT];
    AttnTensors t;
    memset(&t, 0, sizeof t);
    memset(out, 0, sizeof out);
    slot[OUT_O] = &t.o, slot[OUT_LSE] = &t.lse, slot[OUT_DQ] = &t.dq, slot[OUT_DK] = &t.dk;
    slot[OUT_DV] = &t.dv, slot[OUT_DSINKS] = &t.dsinks;
    int failed = 0;
    for (int id = 0; id < OUT_COUNT; id++) {
        if (!output_present(p, (OutputId)id))
            continue;
        int64_t shape[TENSOR_MAX_DIMS];
        const int ndim = output_shape(p, (OutputId)id, shape);
        if (tensor_alloc_poisoned(&out[id], ndim, shape) != 0)
            failed = -1;
        *slot[id] = out[id].data;
    }
    RunStats stats;
    FlError err = {{0}};
    if (failed == 0 && runner_run(run->impl, DIR_BWD, p, &t, NULL, &stats, &err) != FL_OK) {
        fprintf(stderr, "%s on %s: %s\n", run->label, c->name, err.msg);
        failed = -1;
    }
    for (int id = 0; failed >= 0 && id < OUT_COUNT; id++) {
        if (!out[id].data)
            continue;
        const double tol = check_tolerance(PRECISION_BF16, id > OUT_LSE);
        CheckResult r;
        if (check_tensor(&out[id], &c->expected[id], tol, tol, &r) != 0) {
            fprintf(stderr, "%s: %s has the wrong shape\n", c->name, output_file_name((OutputId)id));
            failed = -1;
            break;
        }
        failed += r.mismatches != 0;
        if (r.mismatches && print_failures) {
            char label[64];
            snprintf(label, sizeof label, "    %s", output_file_name((OutputId)id));
            check_print(stdout, label, &out[id], &r, 2);
        }
    }
    for (int id = 0; id < OUT_COUNT; id++)
        tensor_free(&out[id]);
    return failed;
}

/* The most keys any query row of the case sees (bottom-right causal mask, docs/conventions.md). */
static int most_keys_seen(const AttnProblem *p)
{
    int most = 0;
    for (int i = 0; i < p->Tq; i++) {
        const int k = test_keys_seen(p, i);
        most = k > most ? k : most;
    }
    return most;
}

/* One golden case: the clean reference passes; each bug fails exactly where the header says. */
static void check_case(const char *dir, const Run runs[3], int *cases)
{
    Case c;
    FlError err = {{0}};
    if (case_load(dir, 1, &c, &err) != FL_OK) {
        test_fail(__FILE__, __LINE__, "%s", err.msg);
        return;
    }
    const AttnProblem *p = &c.problem;
    if (c.kind != &kind_attention || runner_missing_features(runs[0].impl, DIR_BWD, p) || !runner_head_dims_ok(runs[0].impl, p)) {
        case_free(&c);
        return; /* not a case stage 12 runs */
    }
    ++*cases;
    const int backward = p->dout != NULL, multi_tile = most_keys_seen(p) > TC_BLOCK_C;
    printf("%s: B=%d Hq=%d Hkv=%d Tq=%d Tk=%d d=%d%s%s; a row sees up to %d keys\n", c.name, p->B, p->Hq,
           p->Hkv, p->Tq, p->Tk, p->d, p->causal ? " causal" : "", backward ? ", with dO" : "",
           most_keys_seen(p));
    const int want_fail[3] = {0, multi_tile, backward};
    for (int k = 0; k < 3; k++) {
        const int failed = failing_tensors(&runs[k], &c, want_fail[k]);
        const int ok = failed >= 0 && (failed > 0) == want_fail[k];
        printf("  %-12s %d tensor%s outside the bf16 tolerance: %s as expected%s\n", runs[k].label,
               failed < 0 ? 0 : failed, failed == 1 ? "" : "s", want_fail[k] ? "FAIL" : "pass",
               ok ? "" : "  <- NOT");
        if (!ok)
            test_fail(__FILE__, __LINE__, "%s on %s: %d failing tensors, expected %s", runs[k].label, c.name,
                      failed, want_fail[k] ? "some" : "none");
    }
    case_free(&c);
}

static int is_case_folder(const struct dirent *e)
{
    return e->d_name[0] != '.';
}

int main(void)
{
    const Run runs[3] = {
        {"reference", stage_find("12", DEVICE_CPU, "")},
        {"no rescale", tc_planted_bug_1_cpu[0]},
        {"no D", tc_planted_bug_2_cpu[0]},
    };
    if (!runs[0].impl) {
        fprintf(stderr, "stage 12 has no CPU implementation in this build\n");
        return 1;
    }
    printf("bf16 tolerance: atol = rtol = %g for o and lse, %g for the gradients\n",
           check_tolerance(PRECISION_BF16, 0), check_tolerance(PRECISION_BF16, 1));
    const char *golden = FLASHLAB_SOURCE_DIR "/golden/cases";
    struct dirent **entries;
    const int n = scandir(golden, &entries, is_case_folder, alphasort);
    if (n < 0) {
        perror(golden);
        return 1;
    }
    int cases = 0;
    for (int i = 0; i < n; i++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", golden, entries[i]->d_name);
        check_case(dir, runs, &cases);
        free(entries[i]);
    }
    free(entries);
    printf("%d golden cases that stage 12 runs\n", cases);
    EXPECT(cases >= 8); /* the tc_* cases and the tour */
    return test_exit_code("test_tc_planted_bug");
}
