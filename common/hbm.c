/* hbm.c — HBM traffic counters and the SRAM arena of the tiled CPU stages (see hbm.h). */
#include "hbm.h"

#include <stdlib.h>
#include <string.h>

enum { SRAM_ALIGN = 64 }; /* a cache line: every sub-allocation starts on one */

void hbm_count_read(HbmCounter *c, uint64_t bytes)
{
    if (c)
        __atomic_fetch_add(&c->bytes_read, bytes, __ATOMIC_RELAXED);
}

void hbm_count_write(HbmCounter *c, uint64_t bytes)
{
    if (c)
        __atomic_fetch_add(&c->bytes_written, bytes, __ATOMIC_RELAXED);
}

void hbm_load(HbmCounter *c, float *sram_dst, const float *hbm_src, size_t n)
{
    if (n)
        memcpy(sram_dst, hbm_src, n * sizeof(float));
    hbm_count_read(c, (uint64_t)n * sizeof(float));
}

void hbm_store(HbmCounter *c, float *hbm_dst, const float *sram_src, size_t n)
{
    if (n)
        memcpy(hbm_dst, sram_src, n * sizeof(float));
    hbm_count_write(c, (uint64_t)n * sizeof(float));
}

int sram_init(SramArena *a, size_t capacity_bytes)
{
    a->base = NULL;
    a->capacity = capacity_bytes;
    a->used = 0;
    /* aligned_alloc wants a size that is a multiple of the alignment; the arena itself still
     * hands out at most capacity_bytes */
    size_t rounded = (capacity_bytes + SRAM_ALIGN - 1) / SRAM_ALIGN * SRAM_ALIGN;
    if (rounded < capacity_bytes)
        return -1;
    a->base = aligned_alloc(SRAM_ALIGN, rounded ? rounded : SRAM_ALIGN);
    return a->base ? 0 : -1;
}

void sram_free(SramArena *a)
{
    free(a->base);
    a->base = NULL;
    a->capacity = 0;
    a->used = 0;
}

void sram_reset(SramArena *a)
{
    a->used = 0;
}

float *sram_alloc(SramArena *a, size_t n)
{
    if (!a->base || n > SIZE_MAX / sizeof(float))
        return NULL;
    size_t start = (a->used + SRAM_ALIGN - 1) / SRAM_ALIGN * SRAM_ALIGN; /* padding counts against M */
    size_t bytes = n * sizeof(float);
    if (start > a->capacity || bytes > a->capacity - start)
        return NULL;
    a->used = start + bytes;
    return (float *)(a->base + start);
}
