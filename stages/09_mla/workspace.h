/* stages/09_mla/workspace.h — the scratch buffers of both variants and the attention problem the
 * naive variant hands to stage 08: one layout, included by mla.c and mla.cu (host code only).
 * Every buffer is a slice of the stage's workspace, rounded up to 16 floats (64 bytes); this is
 * the "extra memory" the tools report, and docs/hbm_model.md gives its closed form. */
#ifndef FLASHLAB_STAGE09_WORKSPACE_H
#define FLASHLAB_STAGE09_WORKSPACE_H

#include <stddef.h>
#include <string.h>

#include "attn.h"
#include "kind_mla_stage.h"

/* Points slots[i] at consecutive slices of sizes[i] floats from base (NULL: only measures);
 * returns the bytes used. */
static inline size_t carve(float *base, const size_t *sizes, float **const *slots, int n)
{
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        if (base)
            *slots[i] = base + used;
        used += (sizes[i] + 15) / 16 * 16;
    }
    return used * sizeof(float);
}

/* Absorbed: c_q (N, mq), q_nope (N, H, dh), q_pe (N, H, p), q_lat (N, H, m), o_lat (N, H, m),
 * o (N, H, dv), N = B Tq tokens, token-major. Nothing of size Tk. */
typedef struct {
    float *c_q, *q_nope, *q_pe, *q_lat, *o_lat, *o;
} AbsorbedBuffers;

static inline size_t absorbed_buffers(const MlaProblem *p, float *base, AbsorbedBuffers *w)
{
    const size_t N = (size_t)p->B * p->Tq, H = p->H;
    const size_t sizes[] = {N * p->mq, N * H * p->dh, N * H * p->p, N * H * p->m, N * H * p->m, N * H * p->dv};
    AbsorbedBuffers unused;
    if (!w)
        w = &unused;
    float **const slots[] = {&w->c_q, &w->q_nope, &w->q_pe, &w->q_lat, &w->o_lat, &w->o};
    return carve(base, sizes, slots, 6);
}

static inline size_t absorbed_workspace_bytes(const MlaProblem *p, const RunCtx *ctx)
{
    (void)ctx;
    return absorbed_buffers(p, NULL, NULL);
}


/* The attention problem of the naive variant: MHA over H heads, d = dh + p, dv. */
static inline AttnProblem naive_attention_problem(const MlaProblem *p)
{
    AttnProblem a;
    memset(&a, 0, sizeof a);
    a.B = p->B, a.Hq = a.Hkv = p->H, a.Tq = p->Tq, a.Tk = p->Tk, a.d = p->dh + p->p, a.dv = p->dv;
    a.scale = p->scale, a.causal = p->causal;
    return a;
}

/* Naive: c_q, q_nope, q_pe (token-major); K_up (B Tk, H dh), V_up (B Tk, H dv); Q (B, H, Tq, dh+p),
 * K (B, H, Tk, dh+p), V (B, H, Tk, dv), O (B, H, Tq, dv), lse (B, H, Tq) in stage 08's layout;
 * O back token-major; then stage 08's own workspace (inner). */
typedef struct {
    float *c_q, *q_nope, *q_pe, *k_up, *v_up, *q, *k, *v, *o, *lse, *o_tok;
    void *inner;
} NaiveBuffers;

static inline size_t naive_buffers(const MlaProblem *p, float *base, NaiveBuffers *w)
{
    const size_t N = (size_t)p->B * p->Tq, NK = (size_t)p->B * p->Tk, H = p->H, dk = (size_t)p->dh + p->p;
    const size_t sizes[] = {N * p->mq,   N * H * p->dh,  N * H * p->p,  NK * H * p->dh, NK * H * p->dv, N * H * dk,
                            NK * H * dk, NK * H * p->dv, N * H * p->dv, N * H,          N * H * p->dv};
    NaiveBuffers unused;
    if (!w)
        w = &unused;
    float **const slots[] = {&w->c_q, &w->q_nope, &w->q_pe, &w->k_up, &w->v_up, &w->q,
                             &w->k,   &w->v,      &w->o,    &w->lse,  &w->o_tok};
    const size_t bytes = carve(base, sizes, slots, 11);
    w->inner = base ? (void *)((char *)base + bytes) : NULL;
    return bytes;
}

/* The naive variant's buffers plus `inner` bytes for the attention it runs over the materialised
 * heads (stage 08's CPU forward in mla.c, the cuBLAS naive path of common/cuda_naive.cu in mla.cu). */
static inline size_t naive_workspace_with(const MlaProblem *p, size_t inner)
{
    return naive_buffers(p, NULL, NULL) + inner;
}

#endif
