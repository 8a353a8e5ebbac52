/* stages/08_gqa/mask.h — the causal mask of stage 08, bottom-right aligned (docs/conventions.md), over the
 * packed query rows of a GQA group. gqa.c and gqa.cu both include it, so the CPU and the GPU
 * classify tiles with the same integer arithmetic.
 *
 * Packed rows (new in stage 08): the group = Hq / Hkv query heads that read one kv head are
 * adjacent in memory, so their rows form one matrix of R = group * Tq rows. Packed row r is row
 * r % Tq of query head (kv head) * group + r / Tq, at position r % Tq + Tk - Tq, and sees the keys
 * j <= r % Tq + Tk - Tq. When Tq > Tk the first Tq - Tk rows of every head see no key at all
 * (they get O = 0, lse = -inf, zero gradients).
 * A tile of packed rows either lies inside one head (its positions increase with r) or straddles
 * the end of one head and the start of the next (then its positions cover both ends: the mask
 * takes the whole range). A (query tile, key tile) pair is one of three kinds:
 *   fully visible   every row sees every key of the tile: computed with no mask
 *   crossing        the tile's lowest row misses some of its keys: computed, then masked
 *   fully masked    no row sees any key of the tile: never loaded, never computed
 * With `on` false every row sees every key and no tile crosses. */
#ifndef FLASHLAB_STAGE08_MASK_H
#define FLASHLAB_STAGE08_MASK_H

#include "host_device.h"

typedef struct {
    int on;
    int offset; /* Tk - Tq: the position of query row 0 */
    int Tk;
    int Tq; /* rows per query head: packed row r is row r % Tq of its head */
} Causal;

static inline Causal causal_make(int on, int Tq, int Tk)
{
    Causal c = {on != 0, Tk - Tq, Tk, Tq};
    return c;
}

/* How many keys (from key 0) packed row `row` sees: keys j <= row % Tq + offset, at most Tk. */
FL_HD static inline int keys_seen(Causal c, int row)
{
    /* exercise: begin — the keys packed row `row` sees (check 08: the causal gqa* cases, e.g. gqa4_causal_tq3_tk40) | stub: return c.Tk + 0 * row; */
    const int n = row % c.Tq + c.offset + 1;
    return !c.on ? c.Tk : n <= 0 ? 0 : n < c.Tk ? n : c.Tk;
    /* exercise: end */
}

/* Does the tile of packed rows [r0, r0 + rows) run past the end of a head? */
FL_HD static inline int straddles(Causal c, int r0, int rows)
{
    return r0 % c.Tq + rows > c.Tq;
}

/* The keys the tile's furthest row sees: the tile's K/V walk ends there. */
FL_HD static inline int tile_keys_seen(Causal c, int r0, int rows)
{
    return keys_seen(c, straddles(c, r0, rows) ? c.Tq - 1 : r0 + rows - 1);
}

/* The first tile start t >= r0 (in steps of `tile` rows, R rows in all) with a row that sees
 * key `key`, or R when none does: the backward's walk over the query tiles skips the others. In
 * every head the rows that see the key are the positions p >= key - offset, so the next such row
 * is in r0's head or at the first of the next head's. */
FL_HD static inline int next_tile_seeing(Causal c, int r0, int tile, int R, int key)
{
    if (!c.on || r0 >= R)
        return r0 < R ? r0 : R;
    const int p_first = key - c.offset < 0 ? 0 : key - c.offset;
    if (p_first >= c.Tq)
        return R;
    const int head = r0 / c.Tq * c.Tq; /* first packed row of r0's head */
    const int first = head + p_first > r0 ? head + p_first : r0;
    const int t = first / tile * tile;
    return first >= R ? R : t > r0 ? t : r0;
}

/* Of the keys [kv0, kv0 + rows_kv), how many packed row `row` sees: always a prefix. */
FL_HD static inline int seen_in_tile(Causal c, int row, int kv0, int rows_kv)
{
    const int n = keys_seen(c, row) - kv0;
    return n <= 0 ? 0 : n < rows_kv ? n : rows_kv;
}

/* Does the pair (packed rows [r0, r0 + rows), keys [kv0, kv0 + rows_kv)) cross the diagonal, i.e.
 * does the tile's lowest row miss one of its keys? Only such pairs need the mask. */
FL_HD static inline int crosses(Causal c, int r0, int rows, int kv0, int rows_kv)
{
    const int lowest = straddles(c, r0, rows) ? 0 : r0 % c.Tq;
    return c.on && kv0 + rows_kv - 1 > lowest + c.offset;
}

#endif
