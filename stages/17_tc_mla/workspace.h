/* stages/17_tc_mla/workspace.h — stage 17's scratch buffers: one layout, for reference.c and for the
 * workspace closed form of docs/hbm_model.md. Every buffer is a slice of the stage's workspace,
 * rounded up to 16 floats (64 bytes); this is the "extra memory" the tools report. */
#ifndef FLASHLAB_STAGE17_WORKSPACE_H
#define FLASHLAB_STAGE17_WORKSPACE_H

#include <stddef.h>
#include <stdint.h>

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

/* The nine inputs rounded to bf16 (float32 holding bf16 values: what a bf16 kernel is handed);
 * c_q (N, mq), q_nope (N, H, dh), q_pe (N, H, p), q_lat (N, H, m), o_lat (N, H, m), o (N, H, dv),
 * N = B Tq tokens, token-major; and with more than one split the partials O_s (splits, N H, m) and
 * lse_s (splits, N H). */
typedef struct {
    float *in[MLA_INPUT_COUNT];
    float *c_q, *q_nope, *q_pe, *q_lat, *o_lat, *o, *part_o, *part_lse;
} Bf16Buffers;

static inline size_t bf16_buffers(const MlaProblem *p, int splits, float *base, Bf16Buffers *w)
{
    enum { N_SLOTS = MLA_INPUT_COUNT + 8 };
    const size_t N = (size_t)p->B * p->Tq, H = p->H, parts = splits > 1 ? (size_t)splits : 0;
    size_t sizes[N_SLOTS];
    float **slots[N_SLOTS];
    Bf16Buffers unused;
    if (!w)
        w = &unused;
    for (int id = 0; id < MLA_INPUT_COUNT; id++)
        sizes[id] = mla_numel(p, id), slots[id] = &w->in[id];
    const size_t rest[] = {N * p->mq,   N * H * p->dh, N * H * p->p,   N * H * p->m,
                           N * H * p->m, N * H * p->dv, parts * N * H * p->m, parts * N * H};
    float **const rest_slots[] = {&w->c_q, &w->q_nope, &w->q_pe, &w->q_lat, &w->o_lat, &w->o, &w->part_o, &w->part_lse};
    for (int i = 0; i < 8; i++)
        sizes[MLA_INPUT_COUNT + i] = rest[i], slots[MLA_INPUT_COUNT + i] = rest_slots[i];
    return carve(base, sizes, slots, N_SLOTS);
}

/* The CUDA step's scratch (tc_mla.cu), carved the same way: bf16 c_q (N, mq), q_nope (N, H dh),
 * q_pe (N, H p), q_lat and o_lat (N, H m), o (N, H dv) (a bf16 slice of n elements takes n / 2
 * floats, rounded up); float32 q_pe32 (c_q W_qr before RoPE) and, with more than one split, the
 * partials. No copies of the inputs: the runner makes their bf16 copies. */
typedef struct {
    uint16_t *c_q, *q_nope, *q_pe, *q_lat, *o_lat, *o;
    float *q_pe32, *part_o, *part_lse;
} DeviceBuffers;

static inline size_t device_buffers(const MlaProblem *p, int splits, void *base, DeviceBuffers *w)
{
    enum { N_SLOTS = 9 };
    const size_t N = (size_t)p->B * p->Tq, NH = N * p->H, parts = splits > 1 ? (size_t)splits : 0;
    const size_t sizes[N_SLOTS] = {(N * p->mq + 1) / 2, (NH * p->dh + 1) / 2, (NH * p->p + 1) / 2,
                                   (NH * p->m + 1) / 2, (NH * p->m + 1) / 2,  (NH * p->dv + 1) / 2,
                                   NH * p->p,           parts * NH * p->m,    parts * NH};
    float *f[N_SLOTS];
    float **const slots[N_SLOTS] = {&f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7], &f[8]};
    const size_t bytes = carve((float *)base, sizes, slots, N_SLOTS);
    if (base) {
        w->c_q = (uint16_t *)f[0], w->q_nope = (uint16_t *)f[1], w->q_pe = (uint16_t *)f[2];
        w->q_lat = (uint16_t *)f[3], w->o_lat = (uint16_t *)f[4], w->o = (uint16_t *)f[5];
        w->q_pe32 = f[6], w->part_o = f[7], w->part_lse = f[8];
    }
    return bytes;
}

#endif
