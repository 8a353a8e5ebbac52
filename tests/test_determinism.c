/* test_determinism.c — stage 06 on the GPU, variant "deterministic": forward + backward run 50
 * times on one problem give bitwise identical o, lse, dq, dk and dv (memcmp, not a tolerance).
 * The problem has many K/V tiles per head, so the default variant's dQ atomics really race; the
 * test also reports whether the default variant differed between two runs (information only:
 * float32 atomics may or may not land in the same order).
 *
 * Usage: test_determinism. Returns 77 (skipped) without a CUDA device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "runner.h"
#include "test_support.h"

enum { RUNS = 50 };

/* 2 heads x 4, T = 1000: 16 K/V tiles of 64 keys per head add into every dQ row. */
static const TestShape shape = {2, 4, 1000, 1000, 64, 64};

typedef struct {
    float *o, *lse, *dq, *dk, *dv;
    size_t n_o, n_lse, n_q, n_k;
} Snapshot;

static size_t bytes(size_t n) { return n * sizeof(float); }

static float *copy_of(const float *x, size_t n)
{
    float *c = malloc(bytes(n));
    if (c)
        memcpy(c, x, bytes(n));
    return c;
}

static int snapshot_take(Snapshot *s, const TestProblem *x)
{
    const size_t BH = (size_t)shape.B * shape.H;
    s->n_o = BH * shape.Tq * shape.dv, s->n_lse = BH * shape.Tq;
    s->n_q = BH * shape.Tq * shape.d, s->n_k = BH * shape.Tk * shape.d;
    s->o = copy_of(x->o, s->n_o), s->lse = copy_of(x->lse, s->n_lse);
    s->dq = copy_of(x->dq, s->n_q), s->dk = copy_of(x->dk, s->n_k), s->dv = copy_of(x->dv, s->n_k);
    return s->o && s->lse && s->dq && s->dk && s->dv ? 0 : -1;
}

static void snapshot_free(Snapshot *s)
{
    free(s->o), free(s->lse), free(s->dq), free(s->dk), free(s->dv);
}

/* The names of the tensors of x that differ bitwise from s ("" when none). */
static void differences(const Snapshot *s, const TestProblem *x, char *out, size_t len)
{
    out[0] = '\0';
    const struct {
        const char *name;
        const float *a, *b;
        size_t n;
    } t[] = {{"o", s->o, x->o, s->n_o},     {"lse", s->lse, x->lse, s->n_lse},
             {"dq", s->dq, x->dq, s->n_q},  {"dk", s->dk, x->dk, s->n_k},
             {"dv", s->dv, x->dv, s->n_k}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (memcmp(t[i].a, t[i].b, bytes(t[i].n)) != 0)
            snprintf(out + strlen(out), len - strlen(out), "%s ", t[i].name);
}

/* One forward + backward run of impl into x's (poisoned) outputs. */
static int run_once(const StageImpl *impl, TestProblem *x)
{
    AttnTensors t = test_problem_tensors(x);
    FlError err = {{0}};
    const int rc = runner_run(impl, DIR_BWD, &x->p, &t, NULL, NULL, &err);
    if (rc != FL_OK)
        fprintf(stderr, "stage 06 cuda %s: %s\n", impl->variant, err.msg);
    return rc;
}

/* Runs impl `runs` times; returns the number of runs that differed from the first. */
static int count_differing_runs(const StageImpl *impl, TestProblem *x, int runs, int verbose)
{
    Snapshot first;
    memset(&first, 0, sizeof first);
    if (run_once(impl, x) != FL_OK || snapshot_take(&first, x) != 0) {
        snapshot_free(&first);
        return runs;
    }
    int differing = 0;
    for (int r = 1; r < runs; r++) {
        char which[64];
        if (run_once(impl, x) != FL_OK)
            return runs;
        differences(&first, x, which, sizeof which);
        if (which[0]) {
            differing++;
            if (verbose)
                fprintf(stderr, "run %d differs from run 0 in: %s\n", r, which);
        }
    }
    snapshot_free(&first);
    return differing;
}

int main(void)
{
    if (!cuda_device_available()) {
        printf("no CUDA device: skipped (cuda: %s)\n", cuda_device_description());
        return 77;
    }
    const StageImpl *det = stage_find("06", DEVICE_CUDA, "deterministic");
    const StageImpl *atomic = stage_find("06", DEVICE_CUDA, "");
    if (!det || !atomic) {
        fprintf(stderr, "stage 06 cuda (default and deterministic) is not in this build\n");
        return 1;
    }
    TestProblem x;
    if (test_problem_make(&x, &shape, 60606u) != 0 || test_problem_add_backward(&x, 60607u) != 0) {
        fprintf(stderr, "out of memory\n");
        test_problem_free(&x);
        return 1;
    }
    const int det_differing = count_differing_runs(det, &x, RUNS, 1);
    printf("stage 06 cuda deterministic: %d runs of B=%d H=%d T=%d d=%d, %d differed bitwise from "
           "the first  %s\n",
           RUNS, shape.B, shape.H, shape.Tq, shape.d, det_differing, det_differing ? "FAIL" : "ok");
    const int atomic_differing = count_differing_runs(atomic, &x, 2, 0);
    printf("stage 06 cuda (dQ by atomics), for information: the second run %s the first\n",
           atomic_differing ? "differed bitwise from" : "was bitwise equal to");
    test_problem_free(&x);
    return det_differing ? 1 : 0;
}
