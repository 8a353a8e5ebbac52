/* test_grad_fd.c — an implementation's gradients checked against its own forward pass by central
 * finite differences: no golden files, no reference implementation.
 *
 * The backward pass computes the gradient of L(x) = <dO, o(x)> = sum(O ∘ dO), x = (q, k, v[, sinks]).
 * For a random direction δ the directional derivative has two independent estimates:
 *   g_fd = (L(x + εδ) - L(x - εδ)) / 2ε        from two forward runs (runner_run, DIR_FWD)
 *   g_an = <dq, δq> + <dk, δk> + <dv, δv> [+ <dsinks, δsinks>]   from one backward run (DIR_BWD)
 * Inner products are accumulated in double over the float32 tensors. The direction actually taken
 * is (fl(x + εδ) - fl(x - εδ)) / 2ε, rounded inputs included, and g_an uses that same direction.
 * Each input is checked on its own (δ on q only, k only, ...) so that no term hides behind another,
 * and all together.
 *
 * Tolerance: |g_fd - g_an| <= E_round + 2 E_trunc + E_grad, three terms each printed:
 *   E_round = c u κ_f |dO|_2 rms(v) / ε   float32 roundoff in f, divided by ε. Rounding errors of
 *            independent operations add like a random walk (an accumulation of n terms is off by
 *            about sqrt(n) u of its size, not n u), so: a score s = scale q·k is off by
 *            Δs ~ u d scale rms(q) rms(k); P = exp(s - lse) turns that into a relative error Δs of
 *            P, and the softmax sum and P V add about sqrt(Tk) u each. An o element is a weighted
 *            mean of values, so it is off by about u κ_f rms(v), κ_f = sqrt((d scale rms(q)
 *            rms(k))² + 2 Tk). Over L = <dO, o> these errors add in quadrature, u κ_f |dO|_2
 *            rms(v) at each of x ± εδ, and g_fd divides their difference by 2ε. c = 8 is the
 *            margin: measured against a float64 forward, |L - L_ref| is 0.1 to 14 units of
 *            u |dO|_2 rms(v) on these shapes (14 for the peaked softmax of scale 0.5, d = 80) while
 *            c κ_f is 34 to 326 of them.
 *   E_trunc = |g_fd(2ε) - g_fd(ε)| / 3   the O(ε²) truncation term: g_fd(ε) = g + c₂ ε² + O(ε⁴),
 *            so g_fd(2ε) - g_fd(ε) = 3 c₂ ε² + O(ε⁴), up to roundoff that E_round covers; doubled
 *            for the O(ε⁴) rest.
 *   E_grad = c u κ_g G   float32 roundoff in the gradients themselves, κ_g = sqrt(d + dv + R + Tk)
 *            (their longest accumulations: dQ over Tk keys, dK and dV over the R = (Hq / Hkv) Tq
 *            query rows that read one kv head, R = Tq without GQA), relative to
 *            G = sum |∇_k δ_k|, the sum of the
 *            absolute terms of g_an (the scale the check is relative to: |g_fd - g_an| / G is
 *            printed).
 * ε balances E_round ∝ 1/ε against E_trunc ∝ ε² (c₂ ~ κ³ G / 6, κ ~ 1: a unit step along δ moves
 * the scores by O(1)); ε = 1e-2 puts the tolerance near 1e-4..1e-3 of G on these shapes, where a
 * wrong gradient (a missing D term in dS, a dropped scale, a transposed tile) is off by a sizeable
 * fraction of G. "ratio" is |g_fd - g_an| / tolerance: below 1 passes.
 *
 * Causal mask: when the implementation supports it (FEAT_CAUSAL), every shape runs with the mask
 * on (bottom-right aligned), and a few more shapes made for it as well: a row sees keys
 * j <= i + Tk - Tq only, and when Tq > Tk the first Tq - Tk rows see none (o = 0, zero gradients).
 * The mask is fixed (it depends on positions, not on values), so L stays smooth in x and the same
 * check applies. The tolerance terms stay what they were: a masked row sums fewer keys, so κ_f and
 * κ_g remain upper bounds, and |dO|_2 in E_round is taken over the rows that see at least one key
 * (a row that sees none has o = 0 exactly, with no rounding error for its dO to weigh), which is
 * the plain |dO|_2 when nothing is masked.
 *
 * GQA: when the implementation supports it (FEAT_GQA), shapes with Hq = group Hkv run as well
 * (mask on when supported). Nothing else changes: κ_f is per query row (Tk keys), and κ_g already
 * counts the longest accumulation of dK and dV, over the group's R = group Tq rows.
 *
 * Sliding window, sink tokens, learned sinks (stage 10): when the implementation supports
 * FEAT_WINDOW / FEAT_SINK_TOKENS, shapes with a window (and sink tokens) run as well: window 1,
 * a window with sink tokens, sink tokens >= T, GQA with Tq > Tk (rows that see no key: o = 0,
 * lse = the sink logit). With FEAT_SINKS every shape carries learned sinks and the direction has a
 * part on them, so dsinks is checked against the differences too. The mask is still fixed, so L
 * stays smooth. κ_f stays an upper bound (fewer keys per row). κ_g takes the longest accumulation
 * of dsinks too: dsinks[h] sums P_sink D over the B Tq rows of head h, so with sinks
 * κ_g = sqrt(d + dv + max(R, B Tq) + Tk) (without sinks it is unchanged).
 *
 * bf16 stages (stage 15, PRECISION_BF16 with learned sinks): the forward rounds its inputs and P to
 * bf16, so as a function of q, k and v it is a staircase, and central differences of it are not
 * its derivative (a step of ε = 1e-2 moves P by about one bf16 spacing, 2^-7 relative); its dq, dk
 * and dv are held to the float64 reference by the golden cases and the HBM-model test instead.
 * The learned sinks are different: they are float32 logits that join each row's softmax only after
 * its band walk (o = O / (l + exp(s_h - m)) in the natural base, with O, l, m the walk's, which
 * do not depend on s_h), so the forward is a smooth float32 function of them and
 *   dL/ds_h = -Σ_(b,i) exp(s_h - lse) <dO, o>   exactly for the o the stage computed.
 * That is the stage's dsinks when D = rowsum(dO16 ∘ o) uses the same dO as L, so the inputs q, k,
 * v and dO are drawn bf16-exact here (rounded before use: the runner's bf16 copies are then the
 * same numbers). Only the direction on the sinks is checked. E_trunc and E_grad are as above. E_round
 * is narrower: the band walk (S, P and its bf16 rounding, O, l, m) does not read the sinks, so it is
 * bit for bit the same at s ± εδ and its roundoff cancels in the difference. What differs is each
 * row's join of the sink and its division, o = exp2(m - m') O / l', a per-row factor with a relative
 * error of at most κ_s u, κ_s = 6 + 2 log2(e) max(|lse|, |s|): six roundings (the base-2 logit, two
 * exp2, a product, a sum, the quotient), and two exp2 of arguments of size up to that max, rounded
 * once each. So L = Σ_i <dO_i, o_i> moves by Σ_i D_i e_i with |e_i| <= κ_s u at each point, and
 * as a random walk over the rows and the two points,
 *   E_round(sinks) = c u κ_s sqrt(Σ_i D_i²) / ε,   c = 8 (D_i = <dO_i, o_i> at the unperturbed inputs)
 * (the float32 E_round above counts the whole forward's roundoff: 1.5 to 6 times larger on these
 * shapes). On every shape but the first a wrong sign of dsinks, or half of it, is off by 8 to 4000
 * tolerances (measured with each planted in reference.c); the
 * first one's directional derivative happens to nearly cancel (|g| ~ 1e-3 G). The shapes are bf16 ones
 * (d = dv in {64, 128}) with windows, sink tokens, GQA and rows that see no key.
 *
 * Usage: test_grad_fd STAGE cpu|cuda [VARIANT]   e.g. test_grad_fd 06 cpu naive
 * Exit: 0 all checks pass; 1 a check failed or the stage/variant does not exist; 2 bad usage;
 * 3 the implementation has no backward pass; 77 cuda without a CUDA device. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "bf16.h"
#include "random.h"
#include "runner.h"
#include "test_support.h"

/* T = 1; odd T; Tq < Tk with d != dv and B > 1; Tq > Tk; d = 80 with scale 0.5 (not 1/sqrt(d));
 * several blocks of the tiled stages in both directions. With the causal mask, Tq > Tk gives rows
 * that see no key (37 of 50, 60 of 130). */
typedef struct {
    TestShape s;
    float scale; /* 0: 1/sqrt(d) */
} FdShape;

static const FdShape shapes[] = {
    {{1, 1, 1, 1, 16, 16}, 0.0f},   {{1, 2, 37, 37, 24, 24}, 0.0f},
    {{2, 1, 20, 45, 32, 16}, 0.0f}, {{1, 2, 50, 13, 40, 24}, 0.0f},
    {{1, 1, 17, 29, 80, 80}, 0.5f}, {{1, 1, 130, 70, 64, 64}, 0.0f},
};
enum { SHAPE_COUNT = sizeof shapes / sizeof shapes[0] };

/* Run too, with the mask on, by an implementation that supports it: Tq > Tk by 140, so whole
 * query tiles of the CUDA kernels (128 rows forward, 64 backward) see no key; a tile-aligned
 * square, where tiles end exactly on the diagonal. */
static const FdShape causal_shapes[] = {
    {{1, 1, 200, 60, 32, 32}, 0.0f},
    {{1, 1, 128, 128, 64, 64}, 0.0f},
};
enum { CAUSAL_SHAPE_COUNT = sizeof causal_shapes / sizeof causal_shapes[0] };

/* Run too by an implementation with grouped-query attention (FEAT_GQA), with the causal mask on
 * when it has one: H query heads read Hkv kv heads (group H / Hkv; Hkv = 1 is MQA). MQA group 3
 * with odd T; group 3 with Tq < Tk, d != dv, B > 2; MQA with Tq > Tk (37 of 50 rows of every head
 * see no key); an MQA decode step (Tq = 1, group 4); group 3 with Tq = 100 > Tk, whose packed
 * tiles (R = 300 rows per kv head) straddle two heads in every kernel. dK and dV sum over the
 * group. */
typedef struct {
    FdShape sh;
    int Hkv;
} GqaFdShape;

static const GqaFdShape gqa_shapes[] = {
    {{{1, 3, 37, 37, 24, 24}, 0.0f}, 1},  {{{2, 6, 20, 45, 32, 16}, 0.0f}, 2},
    {{{1, 3, 50, 13, 40, 24}, 0.0f}, 1},  {{{1, 4, 1, 50, 64, 64}, 0.0f}, 1},
    {{{1, 6, 100, 60, 64, 64}, 0.0f}, 2},
};
enum { GQA_SHAPE_COUNT = sizeof gqa_shapes / sizeof gqa_shapes[0] };

/* Run too by an implementation with a sliding window (FEAT_WINDOW), sink tokens when it has them
 * (FEAT_SINK_TOKENS; 0 otherwise): window 1 (each row sees itself only, plus sinks); W = 8 with
 * S = 3 and odd T, where whole K/V tiles fall out of the band; sink tokens >= T (S = 50 > 37,
 * W = 4); MQA group 3 with Tq > Tk (W = 5, S = 2: 37 of 50 rows of each head see no key); group 2
 * with Tq < Tk, B = 2, d != dv (W = 20, S = 4); group 3, Tq = 100 > Tk = 90, W = 10, S = 2 (packed
 * tiles straddle heads); T = 150 with W = 16, S = 4 (the band walk skips tiles in both passes). */
typedef struct {
    GqaFdShape g;
    int window, sink_tokens;
} SwaFdShape;

static const SwaFdShape swa_shapes[] = {
    {{{{1, 2, 37, 37, 24, 24}, 0.0f}, 2}, 1, 0},   {{{{1, 2, 37, 37, 32, 32}, 0.0f}, 1}, 8, 3},
    {{{{1, 1, 37, 37, 24, 24}, 0.0f}, 1}, 4, 50},  {{{{1, 3, 50, 13, 40, 24}, 0.0f}, 1}, 5, 2},
    {{{{2, 6, 20, 45, 32, 16}, 0.0f}, 3}, 20, 4},  {{{{1, 3, 100, 90, 64, 64}, 0.0f}, 1}, 10, 2},
    {{{{1, 1, 150, 150, 64, 64}, 0.0f}, 1}, 16, 4},
};
enum { SWA_SHAPE_COUNT = sizeof swa_shapes / sizeof swa_shapes[0] };

/* Run instead of all of the above by a bf16 implementation (head dims 64 and 128), with learned
 * sinks: gpt-oss-like group 8 with W = 48 over T = 160 (tiles skipped both ways); MQA 2 with
 * Tq = 150 > Tk = 40, W = 16, S = 2 (110 rows of each head see no key: lse = s_h, D = 0); d = 128,
 * B = 2, Tq = 50 < Tk = 200, W = 16, S = 3; T = 1; GQA 2 with W = 100 > T = 70 (causal). */
static const SwaFdShape bf16_shapes[] = {
    {{{{1, 8, 160, 160, 64, 64}, 0.0f}, 1}, 48, 0},  {{{{1, 2, 150, 40, 64, 64}, 0.0f}, 1}, 16, 2},
    {{{{2, 2, 50, 200, 128, 128}, 0.0f}, 1}, 16, 3}, {{{{1, 2, 1, 1, 64, 64}, 0.0f}, 1}, 3, 1},
    {{{{1, 4, 70, 70, 64, 64}, 0.0f}, 2}, 100, 0},
};
enum { BF16_SHAPE_COUNT = sizeof bf16_shapes / sizeof bf16_shapes[0] };

static const double EPS = 1e-2;
static const double U = 5.9604644775390625e-08; /* 2^-24, float32 unit roundoff */

/* One problem with its gradients (sinks and dsinks only when the implementation has FEAT_SINKS). */
typedef struct {
    TestProblem x;
    float *sinks, *dsinks;
    const StageImpl *impl;
    RunCtx opts;
} Fd;

/* One input tensor of L and its gradient. */
typedef struct {
    const char *name;
    float *x;
    const float *grad;
    size_t n;
} Input;

/* L = <dO, o> of a forward run at the current inputs; NAN when the run fails. */
static double forward_loss(Fd *f)
{
    const AttnProblem *p = &f->x.p;
    AttnTensors t = {f->x.o, f->x.lse, NULL, NULL, NULL, NULL};
    FlError err = {{0}};
    if (runner_run(f->impl, DIR_FWD, p, &t, &f->opts, NULL, &err) != FL_OK) {
        fprintf(stderr, "forward run failed: %s\n", err.msg);
        return NAN;
    }
    const size_t n = (size_t)p->B * p->Hq * p->Tq * p->dv;
    double L = 0.0;
    for (size_t i = 0; i < n; i++)
        L += (double)f->x.dout[i] * f->x.o[i];
    return L;
}

/* g_fd at step eps along delta for the inputs in[0..count), whose unperturbed values are x0[a].
 * When dir is not NULL it receives the direction actually taken, (fl(x + eps δ) - fl(x - eps δ))
 * / 2 eps. The inputs are restored from x0 afterwards. */
static double fd_derivative(Fd *f, const Input *in, int count, float *const *x0,
                            float *const *delta, double *const *dir, double eps)
{
    double L[2];
    for (int side = 0; side < 2; side++) {
        const double step = side == 0 ? eps : -eps;
        for (int a = 0; a < count; a++)
            for (size_t i = 0; i < in[a].n; i++) {
                in[a].x[i] = (float)(x0[a][i] + step * delta[a][i]);
                if (dir)
                    dir[a][i] = side == 0 ? in[a].x[i] : (dir[a][i] - in[a].x[i]) / (2 * eps);
            }
        L[side] = forward_loss(f);
    }
    for (int a = 0; a < count; a++)
        memcpy(in[a].x, x0[a], sizeof(float) * in[a].n);
    return (L[0] - L[1]) / (2 * eps);
}

static double rms(const float *x, size_t n)
{
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += (double)x[i] * x[i];
    return n ? sqrt(sum / (double)n) : 0.0;
}

/* |dO|_2 over the query rows that see at least one key (all rows without a mask). */
static double dout_norm_seen(const AttnProblem *p)
{
    const size_t heads = (size_t)p->B * p->Hq, Tq = p->Tq, dv = p->dv;
    double sum = 0.0;
    for (size_t bh = 0; bh < heads; bh++)
        for (size_t i = 0; i < Tq; i++) {
            if (test_keys_seen(p, (int)i) == 0)
                continue;
            const float *row = p->dout + (bh * Tq + i) * dv;
            for (size_t c = 0; c < dv; c++)
                sum += (double)row[c] * row[c];
        }
    return sqrt(sum);
}

/* E_round (see the header): c u κ_f |dO|_2 rms(v) / ε. */
static double roundoff_f(const AttnProblem *p, double eps)
{
    const size_t nq = (size_t)p->B * p->Hq * p->Tq * p->d, nk = (size_t)p->B * p->Hkv * p->Tk * p->d;
    const size_t nv = (size_t)p->B * p->Hkv * p->Tk * p->dv;
    const double ds = p->d * fabs(p->scale) * rms(p->q, nq) * rms(p->k, nk);
    const double kappa_f = sqrt(ds * ds + 2.0 * p->Tk);
    return 8.0 * U * kappa_f * dout_norm_seen(p) * rms(p->v, nv) / eps;
}

/* E_round of the sinks direction of a bf16 stage (see the header): c u κ_s sqrt(Σ_i D_i²) / ε, with
 * o and lse of the unperturbed forward (the backward run of fd_setup left them in x). */
static double roundoff_sinks(const Fd *f, double eps)
{
    const AttnProblem *p = &f->x.p;
    const size_t rows = (size_t)p->B * p->Hq * p->Tq, dv = p->dv;
    double sum_d2 = 0.0, big = 0.0;
    for (size_t i = 0; i < rows; i++) {
        double D = 0.0;
        for (size_t c = 0; c < dv; c++)
            D += (double)p->dout[i * dv + c] * f->x.o[i * dv + c];
        sum_d2 += D * D;
        big = fmax(big, fabs((double)f->x.lse[i]));
    }
    for (int h = 0; h < p->Hq; h++)
        big = fmax(big, fabs((double)p->sinks[h]));
    const double kappa_s = 6.0 + 2.0 * 1.4426950408889634 * big;
    return 8.0 * U * kappa_s * sqrt(sum_d2) / eps;
}

/* One check: δ ~ N(0, 1) on the inputs in[0..count), g_fd against g_an. 0 when it passes. */
static int check_direction(Fd *f, const Input *in, int count, const char *label, Rng *rng)
{
    float *delta[4] = {0}, *x0[4] = {0};
    double *dir[4] = {0};
    int ok = 1;
    for (int a = 0; a < count; a++) {
        const size_t n = in[a].n ? in[a].n : 1;
        delta[a] = test_random_floats(rng, in[a].n);
        x0[a] = malloc(sizeof(float) * n);
        dir[a] = malloc(sizeof(double) * n);
        ok = ok && delta[a] && x0[a] && dir[a];
        if (x0[a])
            memcpy(x0[a], in[a].x, sizeof(float) * in[a].n);
    }
    int failed = 1;
    if (!ok) {
        fprintf(stderr, "out of memory\n");
        goto done;
    }
    /* before the differences overwrite o and lse */
    const int bf16 = f->impl->precision == PRECISION_BF16;
    const double e_round = bf16 ? roundoff_sinks(f, EPS) : roundoff_f(&f->x.p, EPS);
    const double g_fd2 = fd_derivative(f, in, count, x0, delta, NULL, 2 * EPS);
    const double g_fd = fd_derivative(f, in, count, x0, delta, dir, EPS);
    double g_an = 0.0, G = 0.0;
    for (int a = 0; a < count; a++)
        for (size_t i = 0; i < in[a].n; i++) {
            g_an += (double)in[a].grad[i] * dir[a][i];
            G += fabs((double)in[a].grad[i] * dir[a][i]);
        }
    const AttnProblem *p = &f->x.p;
    const double e_trunc = fabs(g_fd2 - g_fd) / 3.0;
    double R = (double)(p->Hq / p->Hkv) * p->Tq; /* rows summed into one dK/dV row */
    if (p->sinks && (double)p->B * p->Tq > R)     /* rows summed into one dsinks element */
        R = (double)p->B * p->Tq;
    const double e_grad = 8.0 * U * sqrt((double)p->d + p->dv + R + p->Tk) * G;
    const double tol = e_round + 2.0 * e_trunc + e_grad;
    const double diff = fabs(g_fd - g_an);
    failed = !(diff <= tol); /* NaN fails */
    printf("  %-6s g_fd %+.8e  g_an %+.8e  |diff| %.2e  tol %.2e (round %.1e trunc %.1e grad %.1e)"
           "  |diff|/G %.1e  ratio %.3f  %s\n",
           label, g_fd, g_an, diff, tol, e_round, e_trunc, e_grad, G > 0 ? diff / G : 0.0,
           tol > 0 ? diff / tol : INFINITY, failed ? "FAIL" : "ok");
done:
    for (int a = 0; a < count; a++)
        free(delta[a]), free(x0[a]), free(dir[a]);
    return failed;
}

/* Rounds n floats to bf16 in place: inputs a bf16 stage reads exactly. */
static void round_to_bf16(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = bf16_round(x[i]);
}

/* The problem of one shape (hkv kv heads, 0: Hkv = H; causal: with the mask on): inputs, dO,
 * sinks when supported; then one backward run. */
static int fd_setup(Fd *f, const FdShape *sh, int hkv, int causal, const TestSwa *swa,
                    uint64_t seed)
{
    const TestFeatures feat = {hkv, causal};
    if (test_problem_make_swa(&f->x, &sh->s, &feat, swa, seed) != 0 ||
        test_problem_add_backward(&f->x, seed + 1) != 0) {
        fprintf(stderr, "out of memory\n");
        return -1;
    }
    if (sh->scale > 0.0f)
        f->x.p.scale = sh->scale;
    if (f->impl->precision == PRECISION_BF16) { /* bf16-exact q, k, v, dO (see the header) */
        const AttnProblem *p = &f->x.p;
        round_to_bf16(f->x.q, (size_t)p->B * p->Hq * p->Tq * p->d);
        round_to_bf16(f->x.k, (size_t)p->B * p->Hkv * p->Tk * p->d);
        round_to_bf16(f->x.v, (size_t)p->B * p->Hkv * p->Tk * p->dv);
        round_to_bf16(f->x.dout, (size_t)p->B * p->Hq * p->Tq * p->dv);
    }
    if (f->impl->features & FEAT_SINKS) {
        Rng rng;
        rng_seed(&rng, seed + 2);
        f->sinks = test_random_floats(&rng, (size_t)f->x.p.Hq);
        f->dsinks = malloc(sizeof(float) * (size_t)f->x.p.Hq);
        if (!f->sinks || !f->dsinks)
            return -1;
        f->x.p.sinks = f->sinks;
    }
    AttnTensors t = test_problem_tensors(&f->x);
    t.dsinks = f->dsinks;
    FlError err = {{0}};
    if (runner_run(f->impl, DIR_BWD, &f->x.p, &t, &f->opts, NULL, &err) != FL_OK) {
        fprintf(stderr, "backward run failed: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static void fd_free(Fd *f)
{
    test_problem_free(&f->x);
    free(f->sinks), free(f->dsinks);
    f->sinks = f->dsinks = NULL;
}

/* Every input alone, then all together, on one shape; returns the number of failed checks. */
static int check_shape(const StageImpl *impl, const FdShape *sh, int hkv, int causal,
                       const TestSwa *swa, int index)
{
    Fd f;
    memset(&f, 0, sizeof f);
    f.impl = impl;
    f.opts.threads = 2;
    const uint64_t seed = 4242u + 97u * (uint64_t)index;
    const TestShape *s = &sh->s;
    printf("B=%d H=%d Hkv=%d Tq=%d Tk=%d d=%d dv=%d scale=%g%s%s", s->B, s->H, hkv ? hkv : s->H,
           s->Tq, s->Tk, s->d, s->dv, sh->scale > 0 ? sh->scale : 1.0 / sqrt((double)s->d),
           causal ? " causal" : "", impl->features & FEAT_SINKS ? " sinks" : "");
    if (swa)
        printf(" window %d sink_tokens %d", swa->window, swa->sink_tokens);
    printf("\n");
    if (fd_setup(&f, sh, hkv, causal, swa, seed) != 0) {
        fd_free(&f);
        return 1;
    }
    const AttnProblem *p = &f.x.p;
    const size_t nq = (size_t)p->B * p->Hq * p->Tq * p->d, nk = (size_t)p->B * p->Hkv * p->Tk * p->d;
    const size_t nv = (size_t)p->B * p->Hkv * p->Tk * p->dv;
    Input in[4] = {{"q", f.x.q, f.x.dq, nq}, {"k", f.x.k, f.x.dk, nk}, {"v", f.x.v, f.x.dv, nv},
                   {"sinks", f.sinks, f.dsinks, (size_t)p->Hq}};
    const int count = f.sinks ? 4 : 3;
    Rng rng;
    rng_seed(&rng, seed + 3);
    int failures = 0;
    if (impl->precision == PRECISION_BF16) { /* the sinks alone (see the header) */
        failures += check_direction(&f, &in[3], 1, in[3].name, &rng);
        fd_free(&f);
        return failures;
    }
    for (int a = 0; a < count; a++)
        failures += check_direction(&f, &in[a], 1, in[a].name, &rng);
    failures += check_direction(&f, in, count, "all", &rng);
    fd_free(&f);
    return failures;
}

/* A bf16 implementation: the sinks direction on the bf16 shapes (see the header). It must have
 * learned sinks and the window of those shapes; otherwise there is nothing to check here. */
static int check_bf16(const StageImpl *impl)
{
    const unsigned need = FEAT_SINKS | FEAT_WINDOW | FEAT_SINK_TOKENS | FEAT_GQA;
    if ((impl->features & need) != need) {
        fprintf(stderr, "stage %s (%s) computes in bf16: only its learned sinks' gradient is checked by "
                        "differences, and it has no learned sinks (or no window, sink tokens, GQA)\n",
                impl->stage, impl->name);
        return 1;
    }
    printf("bf16: bf16-exact q, k, v, dO; the direction on the learned sinks only\n");
    int failures = 0;
    for (int i = 0; i < BF16_SHAPE_COUNT; i++) {
        const SwaFdShape *w = &bf16_shapes[i];
        const TestSwa swa = {w->window, w->sink_tokens, 0};
        failures += check_shape(impl, &w->g.sh, w->g.Hkv, 1, &swa, i);
    }
    printf("%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4 || (strcmp(argv[2], "cpu") && strcmp(argv[2], "cuda"))) {
        fprintf(stderr, "usage: test_grad_fd STAGE cpu|cuda [VARIANT]\n");
        return 2;
    }
    const int cuda = !strcmp(argv[2], "cuda");
    const char *variant = argc == 4 ? argv[3] : "";
    /* no device first: without a GPU the CUDA tests skip even before their stage exists */
    if (cuda && !cuda_device_available()) {
        printf("no CUDA device: skipped (cuda: %s)\n", cuda_device_description());
        return 77;
    }
    const StageImpl *impl = stage_find(argv[1], cuda ? DEVICE_CUDA : DEVICE_CPU, variant);
    if (!impl) {
        fprintf(stderr, "no such stage: %s on %s, variant '%s' (see flashlab list)\n", argv[1],
                argv[2], variant);
        return 1;
    }
    if (!(impl->features & FEAT_BACKWARD) || !impl->backward) {
        fprintf(stderr, "stage %s (%s%s%s, %s) has no backward pass; stage %s adds it\n",
                impl->stage, impl->name, variant[0] ? " " : "", variant, argv[2],
                attn_feature_added_by(FEAT_BACKWARD));
        return 3;
    }
    printf("stage %s (%s%s%s, %s): central differences, eps = %g%s%s%s\n", impl->stage, impl->name,
           variant[0] ? " " : "", variant, argv[2], EPS,
           impl->features & FEAT_CAUSAL ? ", causal mask on" : "",
           impl->features & FEAT_GQA ? ", GQA shapes too" : "",
           impl->features & FEAT_WINDOW ? ", window/sink-token shapes too" : "");
    if (impl->precision == PRECISION_BF16)
        return check_bf16(impl);
    /* an implementation with the causal mask is checked with it on, on its own shapes too */
    const int causal = (impl->features & FEAT_CAUSAL) != 0;
    int failures = 0;
    for (int i = 0; i < SHAPE_COUNT; i++)
        failures += check_shape(impl, &shapes[i], 0, causal, NULL, i);
    for (int i = 0; causal && i < CAUSAL_SHAPE_COUNT; i++)
        failures += check_shape(impl, &causal_shapes[i], 0, causal, NULL, SHAPE_COUNT + i);
    /* an implementation with GQA is checked on grouped shapes too */
    const int gqa = (impl->features & FEAT_GQA) != 0;
    for (int i = 0; gqa && i < GQA_SHAPE_COUNT; i++)
        failures += check_shape(impl, &gqa_shapes[i].sh, gqa_shapes[i].Hkv, causal, NULL,
                                SHAPE_COUNT + CAUSAL_SHAPE_COUNT + i);
    /* an implementation with a sliding window: window (and sink tokens) shapes, GQA ones when it
     * has GQA */
    const int window = (impl->features & FEAT_WINDOW) != 0;
    const int sink_tokens = (impl->features & FEAT_SINK_TOKENS) != 0;
    for (int i = 0; window && i < SWA_SHAPE_COUNT; i++) {
        const SwaFdShape *w = &swa_shapes[i];
        if (w->g.Hkv != w->g.sh.s.H && !gqa)
            continue;
        const TestSwa swa = {w->window, sink_tokens ? w->sink_tokens : 0, 0};
        failures += check_shape(impl, &w->g.sh, w->g.Hkv, 1, &swa,
                                SHAPE_COUNT + CAUSAL_SHAPE_COUNT + GQA_SHAPE_COUNT + i);
    }
    printf("%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
