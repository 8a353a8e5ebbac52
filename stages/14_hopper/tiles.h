/* tiles.h — what stage 14's kernels and its CPU reference share: the tile sizes (the reference
 * rounds P to bf16 after the same running maximum the kernel has, so it walks the keys in the same
 * tiles) and the causal rule, as integer functions both sides call. */
#ifndef FLASHLAB_STAGE14_TILES_H
#define FLASHLAB_STAGE14_TILES_H

#include "host_device.h"

/* query rows per forward thread block: 64 per consumer warpgroup, two at d = 128, three at d = 64 */
#define TC_FWD_BLOCK_R(d) ((d) == 64 ? 192 : 128)
/* One past the last row of forward block k of a head, counted from the head's end: block k holds
 * rows [end - TC_FWD_BLOCK_R(d), end) that are >= 0. Cut from the end, a short block (192 does not
 * divide Tq = 4096) is the first rows, which a causal mask gives the fewest keys, rather than the
 * last, which walk them all. */
#define TC_FWD_BLOCK_END(Tq, d, k) ((Tq) - (k) * TC_FWD_BLOCK_R(d))
/* keys per backward thread block: consumer warpgroups of TC_BWD_WG_KEYS keys each, two at d = 128
 * and three at d = 64 */
#define TC_BWD_BLOCK_C(d) ((d) == 64 ? 192 : 128)
#define TC_BWD_WG_KEYS 64  /* keys of one consumer warpgroup (one wgmma M); each adds its own share
                              of dQ into dq, so dq is read-modify-written once per this many keys */
#define TC_FWD_BLOCK_C 128 /* keys per K/V tile in the forward: stage 12 takes 64; one Hopper wgmma
                              multiplies N = 128 keys at once, and a wider N reads Q from shared
                              memory half as often per multiply-add */
#define TC_BWD_BLOCK_R 64 /* query rows per Q tile in the backward */

/* The keys [0, n) query row i of a head sees: all Tk without the mask; with it the keys
 * j <= i + Tk - Tq (bottom-right aligned), none for the first Tq - Tk rows when Tq > Tk. */
FL_HD static inline int tc_keys_seen(int causal, int Tq, int Tk, int i)
{
    if (!causal)
        return Tk;
    const int n = i + Tk - Tq + 1;
    return n <= 0 ? 0 : n < Tk ? n : Tk;
}

/* The first query row that sees key j (rows before it are above the causal diagonal). */
FL_HD static inline int tc_first_row_seeing(int causal, int Tq, int Tk, int j)
{
    const int i = j - (Tk - Tq);
    return causal && i > 0 ? i : 0;
}

#endif
