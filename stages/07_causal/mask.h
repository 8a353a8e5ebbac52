/* stages/07_causal/mask.h — the causal mask of stage 07, bottom-right aligned (docs/conventions.md).
 * causal.c and causal.cu both include it, so the CPU and the GPU classify tiles with the same
 * integer arithmetic.
 *
 * Query row i sits at position i + Tk - Tq and sees the keys j <= i + Tk - Tq. When Tq > Tk the
 * first Tq - Tk rows see no key at all (they get O = 0, lse = -inf, zero gradients).
 * A (query tile, key tile) pair is one of three kinds:
 *   fully visible   every row sees every key of the tile: computed with no mask
 *   crossing        the tile's first row misses some of its keys: computed, then masked
 *   fully masked    no row sees any key of the tile: never loaded, never computed
 * With `on` false every row sees every key and no tile crosses. */
#ifndef FLASHLAB_STAGE07_MASK_H
#define FLASHLAB_STAGE07_MASK_H

#include "host_device.h"

typedef struct {
    int on;
    int offset; /* Tk - Tq: the position of query row 0 */
    int Tk;
} Causal;

static inline Causal causal_make(int on, int Tq, int Tk)
{
    Causal c = {on != 0, Tk - Tq, Tk};
    return c;
}

/* How many keys (from key 0) query row `row` sees: keys j <= row + offset, at most Tk. */
FL_HD static inline int keys_seen(Causal c, int row)
{
    /* exercise: begin — keys_seen: how many keys (from key 0) row `row` sees, j <= row + Tk - Tq, clamped to [0, Tk]; Tk without the mask (check 07: causal_tq_gt_tk and causal_t37_d80 pass) | stub: return c.Tk + 0 * row; */
    const int n = row + c.offset + 1;
    return !c.on ? c.Tk : n <= 0 ? 0 : n < c.Tk ? n : c.Tk;
    /* exercise: end */
}

/* The first query row that sees key `key`: the rows before it lie above the diagonal. */
FL_HD static inline int first_row_seeing(Causal c, int key)
{
    /* exercise: begin — first_row_seeing: the first query row that sees key `key` (0 without the mask); the backward starts its Q walk there (check 07: the hbm read of the fwd+bwd cases equals the reference's) | stub: return 0 * key * c.on; */
    return !c.on || key <= c.offset ? 0 : key - c.offset;
    /* exercise: end */
}

/* Of the keys [kv0, kv0 + rows_kv), how many query row `row` sees: always a prefix. */
FL_HD static inline int seen_in_tile(Causal c, int row, int kv0, int rows_kv)
{
    const int n = keys_seen(c, row) - kv0;
    return n <= 0 ? 0 : n < rows_kv ? n : rows_kv;
}

/* Does the tile (query rows from q0, keys [kv0, kv0 + rows_kv)) cross the diagonal, i.e. does
 * its first row miss one of its keys? Only such tiles need the mask. */
FL_HD static inline int crosses(Causal c, int q0, int kv0, int rows_kv)
{
    /* exercise: begin — crosses: does the tile's first row miss one of its keys? Only such tiles are masked (check 07: every causal_* case passes) | stub: return 0 * (q0 + kv0 + rows_kv + c.on); */
    return c.on && kv0 + rows_kv - 1 > q0 + c.offset;
    /* exercise: end */
}

#endif
