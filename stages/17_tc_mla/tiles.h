/* stages/17_tc_mla/tiles.h — how stage 17 cuts the latent attention into work and tiles: for its CPU
 * reference now and its kernel to come, so that the reference rounds P~ to bf16 against exactly the
 * running maxima a kernel walking the same tiles has (docs/hbm_model.md counts with the same sizes).
 *
 * A work item is stage 11's: one split of the keys one block of TCM_BLOCK_R stacked rows sees (the
 * rows are the H heads of each new token, stacked as in stage 09: rope.h). A split walks its keys in
 * tiles of TCM_BLOCK_C, one after another, each row keeping one running max and sum. The splits of
 * a block are then merged by their lse (stage 11's combine). */
#ifndef FLASHLAB_STAGE17_TILES_H
#define FLASHLAB_STAGE17_TILES_H

#include "host_device.h"

#define TCM_BLOCK_R 64          /* stacked rows per work item: one warpgroup's M */
#define TCM_BLOCK_C 64          /* cache rows (keys) per tile */
#define TCM_MIN_SPLIT_KEYS 256  /* a split's fewest keys (the split heuristic's floor) */

/* Split s of `splits` takes the block's keys numbered [first, end); late splits may be empty. */
typedef struct {
    int first, end;
} Chunk;

FL_HD static inline Chunk split_chunk(int count, int splits, int s)
{
    const int chunk = (count + splits - 1) / splits;
    Chunk c;
    c.first = s * chunk < count ? s * chunk : count;
    c.end = c.first + chunk < count ? c.first + chunk : count;
    return c;
}

/* The split heuristic (stage 11's). `units` workers run the items * splits work items in rounds of
 * `units`; a last round that is only partly full wastes the rest. The fill of s splits is
 * items*s / (rounds * units). Take the best fill over s = 1 .. most, then the fewest splits within
 * 85% of it (each split costs a partial O and lse written and read back). `most` keeps every split
 * at least min_keys keys long, and at most 256. */
static inline int split_count(long items, int units, int max_keys, int min_keys)
{
    long most = ((long)max_keys + min_keys - 1) / min_keys;
    most = most < 1 ? 1 : most > 256 ? 256 : most;
    double fill[257], best = 0.0;
    for (long s = 1; s <= most; s++) {
        const long work = items * s, rounds = (work + units - 1) / units;
        fill[s] = (double)work / (double)(rounds * units);
        best = fill[s] > best ? fill[s] : best;
    }
    for (long s = 1; s <= most; s++)
        if (fill[s] >= 0.85 * best)
            return (int)s;
    return 1;
}

#endif
