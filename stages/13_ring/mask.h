/* stages/13_ring/mask.h — the causal mask of one chunk pair, bottom-right aligned (docs/conventions.md), over
 * the packed query rows of a GQA group. ring.cu includes it; ring.c compares absolute positions
 * instead (keys_end), one row at a time.
 *
 * New in stage 13: a chunk pair. At each step a rank attends one of its query chunks (rows
 * [q_lo, q_lo + n) of Tq) to one key chunk of the shard it holds (keys [k_lo, k_lo + m) of Tk). That
 * pair is a small attention problem of n rows and m keys whose diagonal has moved: local row i sits
 * at position q_lo + i + Tk - Tq and sees the key k_lo + j when j <= i + q_lo + Tk - Tq - k_lo. So
 * the pair is stage 08's mask with Tq = n, Tk = m and the offset q_lo + Tk - Tq - k_lo
 * (causal_pair). The offset can be anything: a key chunk wholly before the query chunk is fully
 * visible (offset >= m - 1), one wholly after its last position fully masked (n + offset <= 0).
 *
 * From stage 08, unchanged: packed rows. The group = Hq / Hkv query heads that read one kv head are
 * adjacent in the share (split.h), so their rows of one chunk form one matrix of R = group * n
 * packed rows; packed row r is local row r % n of its head. A tile of packed rows either lies inside
 * one head or straddles the end of one and the start of the next (then the mask takes its whole
 * range). A (query tile, key tile) pair is one of three kinds:
 *   fully visible   every row sees every key of the tile: computed with no mask
 *   crossing        the tile's lowest row misses some of its keys: computed, then masked
 *   fully masked    no row sees any key of the tile: never loaded, never computed
 * With `on` false every row sees every key and no tile crosses. */
#ifndef FLASHLAB_STAGE13_MASK_H
#define FLASHLAB_STAGE13_MASK_H

#include "host_device.h"

typedef struct {
    int on;
    int offset; /* q_lo + Tk - Tq - k_lo: the last key local row 0 sees (negative: none) */
    int Tk;     /* keys in the key chunk (m) */
    int Tq;     /* rows per query head in the query chunk (n): packed row r is row r % Tq of its head */
} Causal;

/* Query chunk [q_lo, q_lo + n) of Tq rows against key chunk [k_lo, k_lo + m) of Tk keys. */
static inline Causal causal_pair(int on, int Tq, int Tk, int q_lo, int n, int k_lo, int m)
{
    Causal c = {on != 0, q_lo + Tk - Tq - k_lo, m, n};
    return c;
}

/* How many keys (from key 0 of the chunk) packed row `row` sees: keys j <= row % Tq + offset, at
 * most Tk. */
FL_HD static inline int keys_seen(Causal c, int row)
{
    const int n = row % c.Tq + c.offset + 1;
    return !c.on ? c.Tk : n <= 0 ? 0 : n < c.Tk ? n : c.Tk;
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
