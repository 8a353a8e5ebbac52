/* test_hbm.c — HBM counters (sums, NULL = off, thread safety) and the SRAM arena (capacity
 * exactly M bytes, 64-byte alignment whose padding counts against M). */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"
#include "test_support.h"

static int aligned64(const void *p)
{
    return ((uintptr_t)p & 63u) == 0;
}

static void test_counts_add_up(void)
{
    HbmCounter c = {0, 0};
    hbm_count_read(&c, 100);
    hbm_count_read(&c, 28);
    hbm_count_write(&c, 7);
    EXPECT(c.bytes_read == 128 && c.bytes_written == 7);

    float hbm[10], sram[10];
    for (int i = 0; i < 10; i++)
        hbm[i] = (float)i + 0.5f;
    hbm_load(&c, sram, hbm, 10);
    EXPECT(memcmp(sram, hbm, sizeof hbm) == 0);
    EXPECT(c.bytes_read == 128 + 40 && c.bytes_written == 7);
    for (int i = 0; i < 10; i++)
        sram[i] = -(float)i;
    hbm_store(&c, hbm + 2, sram, 6);
    EXPECT(hbm[2] == 0.0f && hbm[7] == -5.0f && hbm[8] == 8.5f && hbm[1] == 1.5f);
    EXPECT(c.bytes_read == 168 && c.bytes_written == 7 + 24);
    hbm_load(&c, sram, hbm, 0); /* nothing to copy, nothing counted */
    EXPECT(c.bytes_read == 168);
}

static void test_null_counter_is_off(void)
{
    hbm_count_read(NULL, 1000);
    hbm_count_write(NULL, 1000);
    float hbm[4] = {1, 2, 3, 4}, sram[4] = {0};
    hbm_load(NULL, sram, hbm, 4); /* still copies */
    EXPECT(sram[0] == 1.0f && sram[3] == 4.0f);
    sram[1] = 9.0f;
    hbm_store(NULL, hbm, sram, 4);
    EXPECT(hbm[1] == 9.0f);
}

static void test_arena_capacity(void)
{
    SramArena a;
    EXPECT(sram_init(&a, 4096) == 0);
    EXPECT(a.capacity == 4096 && a.used == 0);
    float *all = sram_alloc(&a, 1024); /* exactly M bytes */
    EXPECT(all != NULL && aligned64(all) && a.used == 4096);
    all[1023] = 1.0f; /* the last float is usable (ASan checks) */
    EXPECT(sram_alloc(&a, 1) == NULL); /* the byte past M */
    sram_reset(&a);
    EXPECT(a.used == 0);
    size_t used_before = a.used;
    EXPECT(sram_alloc(&a, 1025) == NULL); /* M + 4 bytes in one request */
    EXPECT(a.used == used_before);        /* a refused request takes nothing */
    EXPECT(sram_alloc(&a, SIZE_MAX / 2) == NULL); /* no overflow into a small request */
    sram_free(&a);
    EXPECT(a.base == NULL);

    /* a capacity that is not a multiple of 64 is honoured to the byte */
    EXPECT(sram_init(&a, 100) == 0);
    float *p = sram_alloc(&a, 25);
    EXPECT(p != NULL && a.used == 100);
    p[24] = 2.0f;
    sram_reset(&a);
    EXPECT(sram_alloc(&a, 26) == NULL);
    sram_free(&a);
}

static void test_arena_alignment(void)
{
    SramArena a;
    EXPECT(sram_init(&a, 192) == 0);
    float *x = sram_alloc(&a, 1);  /* bytes [0, 4) */
    float *y = sram_alloc(&a, 32); /* padded to 64: bytes [64, 192) */
    EXPECT(x && y && aligned64(x) && aligned64(y));
    EXPECT((unsigned char *)y - (unsigned char *)x == 64);
    EXPECT(a.used == 192);
    sram_reset(&a);
    EXPECT(sram_alloc(&a, 1) != NULL);
    /* 4 + 132 = 136 bytes of data fit in 192, but with the padding the request ends at 196 */
    EXPECT(sram_alloc(&a, 33) == NULL);
    sram_free(&a);

    EXPECT(sram_init(&a, 1 << 16) == 0);
    for (size_t n = 1; n < 40; n += 3) {
        float *q = sram_alloc(&a, n);
        EXPECT(q != NULL && aligned64(q));
    }
    sram_free(&a);
}

/* Counted copies from two OpenMP threads sum exactly. */
static void test_threads_sum_exactly(void)
{
    enum { ITERS = 10000000, N = 16 };
    HbmCounter c = {0, 0};
    float hbm[N] = {0};
    int threads_seen = 0;
#pragma omp parallel num_threads(2)
    {
#pragma omp atomic
        threads_seen++;
        float sram[N];
#pragma omp for
        for (int i = 0; i < ITERS; i++) {
            hbm_load(&c, sram, hbm, (size_t)(i % N) + 1);
            hbm_count_write(&c, 3);
        }
    }
    uint64_t want_read = 0;
    for (int i = 0; i < ITERS; i++)
        want_read += (uint64_t)((i % N) + 1) * sizeof(float);
    EXPECT(c.bytes_read == want_read);
    EXPECT(c.bytes_written == 3ull * ITERS);
    if (threads_seen < 2)
        printf("test_hbm: note: OpenMP gave only %d thread(s)\n", threads_seen);
}

int main(void)
{
    test_counts_add_up();
    test_null_counter_is_off();
    test_arena_capacity();
    test_arena_alignment();
    test_threads_sum_exactly();
    return test_exit_code("test_hbm");
}
