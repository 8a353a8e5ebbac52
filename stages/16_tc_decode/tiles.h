/* stages/16_tc_decode/tiles.h — what stage 16's kernel and its CPU reference share:
 * how a work item is cut into tiles and who walks which, so that the reference rounds P to bf16
 * after exactly the running maxima the kernel will have.
 *
 * A work item is stage 11's: one split of the keys one query block of a kv head sees. On tensor
 * cores its rows are an MMA's M: the group's query heads times Tq packed together (stage 08), 16
 * rows (one mma.sync m16n8k16 tile), or 32 when group * Tq > 16 (a gpt-oss group of 8 with Tq 3
 * or 4). The split's keys are walked in tiles of TCD_BLOCK_C; TCD_WARPS warps take turns, warp w
 * the tiles w, w + TCD_WARPS, ..., each with its own running max, sum and O, merged at the end of
 * the split as the splits themselves are merged (by their maxima). A decode step reads every key
 * once and does little arithmetic on it, so the warps do not share a tile: each streams its own. */
#ifndef FLASHLAB_STAGE16_TILES_H
#define FLASHLAB_STAGE16_TILES_H

#include "host_device.h"

#define TCD_BLOCK_C 16        /* keys per tile: one mma.sync K step of P V (32 measured slower on an
                                 H200: its larger ring left room for one block of 4 warps an SM) */
#define TCD_WARPS 4           /* warps per work item, each walking every TCD_WARPS-th tile */
#define TCD_STAGES 2          /* the kernel's shared-memory stages per warp (tiles in flight + 1) */
#define TCD_MIN_SPLIT_KEYS 512 /* a split's fewest keys (paged.h's heuristic: the CPU, large batches) */
#define TCD_MIN_GPU_SPLIT_KEYS 128 /* ... and on the GPU for a small batch: 2 tiles a warp (tc_decode.cu) */
#define TCD_SM_BLOCKS 2        /* blocks an SM gets in a decode step of very few items (8 warps) ... */
#define TCD_MANY_SPLITS 16     /* ... when filling every resident place takes more splits than this */

/* Packed query rows per work item: one 16-row MMA tile, or two when the rows need them. */
FL_HD static inline int tcd_block_rows(int packed_rows) { return packed_rows <= 16 ? 16 : 32; }

/* Tiles of a split of n keys (the last may be short). */
FL_HD static inline int tcd_tiles(int n) { return (n + TCD_BLOCK_C - 1) / TCD_BLOCK_C; }

#endif
