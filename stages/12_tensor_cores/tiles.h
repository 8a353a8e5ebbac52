/* tiles.h — the tile sizes stage 12's kernels and its CPU reference share. The reference rounds P
 * to bf16 after the same running maximum the kernel has, so it walks the keys in the same tiles. */
#ifndef FLASHLAB_STAGE12_TILES_H
#define FLASHLAB_STAGE12_TILES_H

#define TC_BLOCK_R 128    /* query rows per forward thread block (8 warps x 16 rows) */
#define TC_BLOCK_C 64     /* keys per K/V tile (forward) and per backward thread block */
#define TC_BWD_BLOCK_R 64 /* query rows per Q tile in the backward */

#endif
