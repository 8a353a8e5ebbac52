/* hbm.h — HBM traffic counters and the explicit SRAM arena of the CPU tiled stages (docs/hbm_model.md).
 *
 * The model: ordinary arrays are "HBM". A tiled CPU stage owns an SRAM arena of M bytes per worker;
 * data enters it only through hbm_load() and leaves only through hbm_store(), and both count bytes.
 * Stages 01/02 count whole-tensor passes with hbm_count_read()/hbm_count_write() where the code
 * reads or writes them. CUDA kernels count in the kernel into RunCtx.hbm_dev instead. */
#ifndef FLASHLAB_HBM_H
#define FLASHLAB_HBM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Default SRAM size M of the CPU tiled stages (--sram overrides it). */
#define FLASHLAB_DEFAULT_SRAM_BYTES (128u * 1024u)

typedef struct {
    uint64_t bytes_read;    /* HBM -> SRAM / registers */
    uint64_t bytes_written; /* -> HBM */
} HbmCounter;

/* Thread-safe adds; a NULL counter means counting is off and the call does nothing. */
void hbm_count_read(HbmCounter *c, uint64_t bytes);
void hbm_count_write(HbmCounter *c, uint64_t bytes);

/* Counted copies between HBM arrays and SRAM buffers (n floats). */
void hbm_load(HbmCounter *c, float *sram_dst, const float *hbm_src, size_t n);
void hbm_store(HbmCounter *c, float *hbm_dst, const float *sram_src, size_t n);

/* A bump allocator over M bytes: the only on-chip memory a tiled CPU stage may use. */
typedef struct {
    unsigned char *base;
    size_t capacity; /* M bytes */
    size_t used;
} SramArena;

/* Returns 0, or -1 when the host allocation fails. */
int sram_init(SramArena *a, size_t capacity_bytes);
void sram_free(SramArena *a);
void sram_reset(SramArena *a);
/* n floats from the arena, 64-byte aligned; NULL when the arena would exceed M bytes: the stage
 * then fails loudly with an error that names M, the tile sizes and d. */
float *sram_alloc(SramArena *a, size_t n);

#ifdef __cplusplus
}
#endif
#endif
