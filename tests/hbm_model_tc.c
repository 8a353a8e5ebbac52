/* hbm_model_tc.c — the problems and the per-problem check the bf16 stages' HBM-model tests share
 * (hbm_model_tc.h). */
#include "hbm_model_tc.h"

#include <stdio.h>

#include "attn.h"
#include "check.h"

/* Head dims 64 and 128 only (the stages run no others):
 *   odd T = 37, causal;  GQA 2 with B = 2, T = 200 (a forward block of 128 and one of 72, four
 *   backward tiles, the last short), no mask;  MQA with 4 heads, d = 128, causal Tq = 150 > Tk = 70
 *   (the first 80 rows of each head see no key: a backward tile of 64 that is never visited);
 *   GQA 2, d = 128, causal Tq = 45 < Tk = 300 (five key tiles, the last of 44 keys);  T = 1;
 *   a decode step, GQA 4, Tq = 1 over Tk = 129 keys, no mask;  d = 64, causal, T = 400 (stage 14's
 *   forward blocks of 192 rows, cut from the last row back, leave a short first block of 16). */
const TcShape tc_shapes[TC_SHAPE_COUNT] = {
    {{1, 2, 37, 37, 64, 64}, 2, 1},    {{2, 4, 200, 200, 64, 64}, 2, 0},
    {{1, 4, 150, 70, 128, 128}, 1, 1}, {{1, 2, 45, 300, 128, 128}, 1, 1},
    {{1, 1, 1, 1, 64, 64}, 1, 1},      {{1, 8, 1, 129, 128, 128}, 2, 0},
    {{1, 2, 400, 400, 64, 64}, 1, 1}, /* d = 64, causal: blocks of 192 rows that do not divide Tq */
};

uint64_t tc_kv_rows_forward(const AttnProblem *p, int rows, int keys, int from_end)
{
    uint64_t sum = 0;
    for (int i0 = 0; i0 < p->Tq; i0 += rows) {
        const int last = from_end ? p->Tq - 1 - i0 : (int)min_u64((uint64_t)i0 + (uint64_t)rows, (uint64_t)p->Tq) - 1;
        const uint64_t seen = (uint64_t)test_keys_seen(p, last);
        sum += min_u64((uint64_t)p->Tk, (seen + (uint64_t)keys - 1) / (uint64_t)keys * (uint64_t)keys);
    }
    return sum;
}

/* Runs one row and the model on x; *failed = 0 when both passes' counts equal the model and the
 * outputs, gradients and dsinks (where x has sinks) are within the bf16 tolerance of the float64
 * reference. Non-zero when the run itself did not happen. */
static int run_and_judge(const StageImpl *impl, const HbmModelRow *row, TestProblem *x, size_t M, HbmPassCounts *got,
                         HbmPassCounts *want, double *err_fwd, double *err_bwd, int *failed)
{
    if (hbm_run_model(impl, row, x, M, got, want) != 0)
        return 1;
    *err_fwd = ref_attention_max_error(&x->p, x->o, x->lse, ERR_ABS_REL);
    *err_bwd = ref_gradients_max_error_sinks(&x->p, x->dq, x->dk, x->dv, x->dsinks, ERR_ABS_REL);
    const int counts_ok = hbm_counts_equal(&got->fwd, &want->fwd) && hbm_counts_equal(&got->bwd, &want->bwd);
    /* |out - ref| / (1 + |ref|) <= tol is the checker's rule with atol = rtol = tol */
    *failed = !counts_ok || !(*err_fwd <= check_tolerance(PRECISION_BF16, 0)) ||
              !(*err_bwd <= check_tolerance(PRECISION_BF16, 1));
    return 0;
}

/* One row on one shape: 0 when both passes' counts equal the model and the outputs are within the
 * bf16 tolerance of the float64 reference. */
int tc_check_shape(const char *stage, TcWalk walk, uint64_t seed_base, const StageImpl *impl,
                   const HbmModelRow *row, int shape, size_t M)
{
    const TcShape *g = &tc_shapes[shape];
    const TestFeatures feat = {g->Hkv, g->causal};
    const uint64_t seed = seed_base + (uint64_t)shape * 17u;
    TestProblem x;
    int failed = 1;
    if (test_problem_make_with(&x, &g->s, &feat, seed) != 0 || test_problem_add_backward(&x, seed + 1) != 0) {
        fprintf(stderr, "out of memory\n");
        goto done;
    }
    HbmPassCounts got, want;
    double err_fwd, err_bwd;
    if (run_and_judge(impl, row, &x, M, &got, &want, &err_fwd, &err_bwd, &failed) != 0)
        goto done;
    const AttnProblem *p = &x.p;
    uint64_t kf, s;
    walk(p, &kf, &s);
    printf("stage %s %-4s %-5s %-6s B=%d Hq=%d Hkv=%d Tq=%d Tk=%d d=%d dv=%d  K_f=%llu S=%llu"
           "  err o/lse %.1e  grads %.1e  %s\n",
           stage, device_name(row->device), hbm_row_name(row), g->causal ? "causal" : "full", p->B, p->Hq, p->Hkv, p->Tq, p->Tk, p->d,
           p->dv, (unsigned long long)kf, (unsigned long long)s, err_fwd,
           err_bwd, failed ? "FAIL" : "ok");
    hbm_print_counts("fwd", &got.fwd, &want.fwd);
    hbm_print_counts("bwd", &got.bwd, &want.bwd);
done:
    test_problem_free(&x);
    return failed;
}


int tc_swa_check_shape(const TcSwaTest *t, const TcSwaShape *g, uint64_t seed, const StageImpl *impl,
                       const HbmModelRow *row, size_t M)
{
    const TestFeatures feat = {g->Hkv, g->causal};
    const TestSwa swa = {g->window, g->sink_tokens, g->sinks};
    TestProblem x;
    int failed = 1;
    if (test_problem_make_swa(&x, &g->s, &feat, &swa, seed) != 0 || test_problem_add_backward(&x, seed + 1) != 0) {
        fprintf(stderr, "out of memory\n");
        goto done;
    }
    HbmPassCounts got, want;
    double err_fwd, err_bwd;
    if (run_and_judge(impl, row, &x, M, &got, &want, &err_fwd, &err_bwd, &failed) != 0)
        goto done;
    const AttnProblem *p = &x.p;
    char terms[160];
    t->describe(p, terms, sizeof terms);
    printf("stage %s %-4s B=%d Hq=%d Hkv=%d Tq=%d Tk=%d d=%d W=%d S=%d%s%s  %s  err o/lse %.1e  grads %.1e  %s\n",
           t->stage, device_name(row->device), p->B, p->Hq, p->Hkv, p->Tq, p->Tk, p->d, p->window, p->sink_tokens,
           p->sinks ? " sinks" : "", p->causal ? " causal" : " full", terms, err_fwd, err_bwd, failed ? "FAIL" : "ok");
    hbm_print_counts("fwd", &got.fwd, &want.fwd);
    hbm_print_counts("bwd", &got.bwd, &want.bwd);
    if (!failed && g->window >= g->s.Tk && !g->sink_tokens && !g->sinks)
        failed = t->compare_parent(row, &x, &got);
done:
    test_problem_free(&x);
    return failed;
}
