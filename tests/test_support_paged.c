/* test_support_paged.c — paged decode problems (test_support.h): seeded random problems whose
 * unused slots hold NaN, as in the golden cases (test_paged_make), and their float64 reference
 * (ref_paged_attention). The reference computes nothing new: each sequence's keys and values are
 * copied out of the page pools into a contiguous block, and that sequence alone goes through
 * ref_attention as a problem with B = 1 and Tk = seq_lens[b]. So the mask and sink rules are the
 * very ones the contiguous reference applies (docs/conventions.md, "Paged decode cases"). */
#include "test_support.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const float *test_paged_row(const AttnProblem *p, const float *pool, int b, int h, int j, int width)
{
    const size_t page = (size_t)p->block_table[(size_t)b * p->max_pages + j / p->page_size];
    const size_t slot = page * (size_t)p->page_size + (size_t)(j % p->page_size);
    return pool + (slot * (size_t)p->Hkv + (size_t)h) * (size_t)width;
}

/* Sequence b of p as a contiguous problem of its own, into sub; its keys and values are gathered
 * into *k (Hkv, n, d) and *v (Hkv, n, dv), which the caller frees (also on failure). 0 or -1. */
static int sequence_problem(const AttnProblem *p, int b, AttnProblem *sub, float **k, float **v)
{
    const int n = p->seq_lens[b];
    *sub = *p;
    sub->B = 1, sub->Tk = n;
    sub->page_size = sub->num_pages = sub->max_pages = 0;
    sub->block_table = sub->seq_lens = NULL;
    sub->q = p->q + (size_t)b * p->Hq * p->Tq * p->d;
    *k = malloc(sizeof(float) * ((size_t)p->Hkv * n * p->d + 1));
    *v = malloc(sizeof(float) * ((size_t)p->Hkv * n * p->dv + 1));
    if (!*k || !*v)
        return -1;
    for (int h = 0; h < p->Hkv; h++)
        for (int j = 0; j < n; j++) {
            memcpy(*k + ((size_t)h * n + j) * p->d, test_paged_row(p, p->k, b, h, j, p->d), sizeof(float) * p->d);
            memcpy(*v + ((size_t)h * n + j) * p->dv, test_paged_row(p, p->v, b, h, j, p->dv), sizeof(float) * p->dv);
        }
    sub->k = *k, sub->v = *v;
    return 0;
}

/* The reference of sequence b, copied into its rows of ref. 0 or -1. */
static int reference_sequence(const AttnProblem *p, int b, RefAttention *ref)
{
    AttnProblem sub;
    RefAttention part;
    float *k = NULL, *v = NULL;
    int rc = sequence_problem(p, b, &sub, &k, &v);
    if (rc == 0)
        rc = ref_attention(&sub, &part);
    if (rc == 0) {
        const size_t rows = (size_t)p->Hq * p->Tq, first = (size_t)b * rows;
        memcpy(ref->o + first * ref->dv, part.o, sizeof(double) * rows * ref->dv);
        memcpy(ref->lse + first, part.lse, sizeof(double) * rows);
        ref_attention_free(&part);
    }
    free(k), free(v);
    return rc;
}

int ref_paged_attention(const AttnProblem *p, RefAttention *ref)
{
    memset(ref, 0, sizeof *ref);
    if (p->page_size <= 0 || !p->block_table || !p->seq_lens)
        return -1;
    ref->rows = (size_t)p->B * p->Hq * p->Tq;
    ref->dv = (size_t)p->dv;
    ref->o = malloc(sizeof(double) * (ref->rows * ref->dv + 1));
    ref->lse = malloc(sizeof(double) * (ref->rows + 1));
    int rc = ref->o && ref->lse ? 0 : -1;
    for (int b = 0; rc == 0 && b < p->B; b++)
        rc = reference_sequence(p, b, ref);
    if (rc != 0)
        ref_attention_free(ref);
    return rc;
}

/* ---- paged problems -------------------------------------------------------------------------- */

static float *nan_floats(size_t n)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; x && i < n; i++)
        x[i] = NAN;
    return x;
}

void test_paged_free(TestPaged *x)
{
    free(x->q), free(x->k), free(x->v), free(x->sinks), free(x->o), free(x->lse);
    free(x->table), free(x->lens);
    memset(x, 0, sizeof *x);
}

int test_paged_make(TestPaged *x, const TestPagedShape *s, uint64_t seed)
{
    memset(x, 0, sizeof *x);
    AttnProblem *p = &x->p;
    p->B = s->B, p->Hq = s->Hq, p->Hkv = s->Hkv, p->Tq = s->Tq, p->d = s->d, p->dv = s->dv;
    p->scale = 1.0f / sqrtf((float)s->d);
    p->causal = s->causal || s->window > 0, p->window = s->window, p->sink_tokens = s->sink_tokens;
    p->page_size = s->page_size;
    for (int b = 0; b < s->B; b++)
        p->Tk = s->lens[b] > p->Tk ? s->lens[b] : p->Tk;
    Rng rng;
    rng_seed(&rng, seed);
    x->q = test_random_floats(&rng, (size_t)s->B * s->Hq * s->Tq * s->d);
    if (s->sinks)
        x->sinks = test_random_floats(&rng, (size_t)s->Hq);
    x->o = nan_floats((size_t)s->B * s->Hq * s->Tq * s->dv);
    x->lse = nan_floats((size_t)s->B * s->Hq * s->Tq);
    if (s->page_size == 0) {
        x->k = test_random_floats(&rng, (size_t)s->B * s->Hkv * p->Tk * s->d);
        x->v = test_random_floats(&rng, (size_t)s->B * s->Hkv * p->Tk * s->dv);
    } else {
        int used = 0, most = 0;
        for (int b = 0; b < s->B; b++) {
            const int n = (s->lens[b] + s->page_size - 1) / s->page_size;
            used += n, most = n > most ? n : most;
        }
        p->num_pages = used + 2, p->max_pages = most + 1;
        const size_t slot_k = (size_t)s->Hkv * s->d, slot_v = (size_t)s->Hkv * s->dv;
        const size_t slots = (size_t)p->num_pages * s->page_size;
        x->k = nan_floats(slots * slot_k), x->v = nan_floats(slots * slot_v);
        x->table = malloc(sizeof(int32_t) * (size_t)s->B * p->max_pages);
        x->lens = malloc(sizeof(int32_t) * (size_t)s->B);
        int32_t *order = malloc(sizeof(int32_t) * (size_t)p->num_pages);
        if (!x->k || !x->v || !x->table || !x->lens || !order) {
            free(order);
            return -1;
        }
        for (int i = 0; i < p->num_pages; i++)
            order[i] = i;
        for (int i = p->num_pages - 1; i > 0; i--) {
            const int j = (int)(rng_next_u64(&rng) % (uint64_t)(i + 1)), t = order[i];
            order[i] = order[j], order[j] = t;
        }
        for (int b = 0, next = 0; b < s->B; b++) {
            x->lens[b] = s->lens[b];
            for (int i = 0; i < p->max_pages; i++)
                x->table[(size_t)b * p->max_pages + i] = i * s->page_size < s->lens[b] ? order[next++] : -1;
            for (int j = 0; j < s->lens[b]; j++) {
                const size_t slot = (size_t)x->table[(size_t)b * p->max_pages + j / s->page_size] * s->page_size +
                                    j % s->page_size;
                rng_fill_normal(&rng, x->k + slot * slot_k, slot_k, 1.0f);
                rng_fill_normal(&rng, x->v + slot * slot_v, slot_v, 1.0f);
            }
        }
        free(order);
        p->block_table = x->table, p->seq_lens = x->lens;
    }
    p->q = x->q, p->k = x->k, p->v = x->v, p->sinks = x->sinks;
    return x->q && x->k && x->v && x->o && x->lse && (!s->sinks || x->sinks) ? 0 : -1;
}
