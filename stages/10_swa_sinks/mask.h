/* stages/10_swa_sinks/mask.h — the mask of stage 10: causal (bottom-right aligned), a sliding
 * window of W keys and S sink tokens (DESIGN §3), over the packed query rows of a GQA group.
 * swa_sinks.c and swa_sinks.cu both include it, so the CPU and the GPU classify tiles with the
 * same integer arithmetic.
 *
 * Packed rows (stage 08): the group = Hq / Hkv query heads that read one kv head form one matrix
 * of R = group * Tq rows; packed row r is at position p = r % Tq + Tk - Tq.
 * New in stage 10: the keys row p sees are no longer a prefix but up to two runs:
 *   the window   [lo, hi)  with hi = p + 1 (clamped to [0, Tk]) and lo = hi - W (W > 0), else 0
 *   the sinks    [0, se)   with se = min(S, hi): the first S keys stay visible (StreamingLLM)
 * A window implies causal; without a window, sink tokens change nothing (they are inside [0, hi)).
 * When Tq > Tk the first Tq - Tk rows of every head see no key at all.
 * A (query tile, key tile) pair is one of three kinds:
 *   fully visible   every row sees every key of the tile: computed with no mask
 *   crossing        some row misses some key: computed, then masked key by key (key_visible)
 *   fully masked    no row sees any key of the tile: never loaded, never computed
 * Around the diagonal band and the sink columns, every other tile is fully masked, so the work
 * per query row is O(W + S), not O(Tk). With `on` false every row sees every key. */
#ifndef FLASHLAB_STAGE10_MASK_H
#define FLASHLAB_STAGE10_MASK_H

#include "host_device.h"

typedef struct {
    int on;      /* causal (a window implies it) */
    int offset;  /* Tk - Tq: the position of query row 0 */
    int Tk;
    int Tq;      /* rows per query head: packed row r is row r % Tq of its head */
    int window;  /* W > 0: keep keys p - W < j <= p; 0 = no window */
    int sink_tokens; /* S: keep keys j < S as well (still j <= p) */
} Causal;

static inline Causal causal_make(int on, int Tq, int Tk, int window, int sink_tokens)
{
    Causal c = {on != 0 || window > 0, Tk - Tq, Tk, Tq, window, sink_tokens};
    return c;
}

FL_HD static inline int clamp_int(int x, int lo, int hi) { return x < lo ? lo : x > hi ? hi : x; }

/* End of the keys packed row `row` sees (exclusive): keys j <= p, at most Tk. */
FL_HD static inline int keys_seen(Causal c, int row)
{
    return !c.on ? c.Tk : clamp_int(row % c.Tq + c.offset + 1, 0, c.Tk);
}

/* Start of the row's window: the keys before it are hidden unless they are sink tokens. */
FL_HD static inline int window_start(Causal c, int row)
{
    return c.window > 0 ? clamp_int(keys_seen(c, row) - c.window, 0, c.Tk) : 0;
}

/* End of the row's sink tokens (exclusive). */
FL_HD static inline int sinks_end(Causal c, int row)
{
    const int hi = keys_seen(c, row);
    return c.sink_tokens < hi ? c.sink_tokens : hi;
}

/* Does packed row `row` see key `key`? */
FL_HD static inline int key_visible(Causal c, int row, int key)
{
    return key < keys_seen(c, row) && (key >= window_start(c, row) || key < sinks_end(c, row));
}

/* How many keys packed row `row` sees: the window run plus the sink tokens before it. */
FL_HD static inline int visible_count(Causal c, int row)
{
    const int lo = window_start(c, row), se = sinks_end(c, row);
    return keys_seen(c, row) - lo + (se < lo ? se : lo);
}

/* Does the tile of packed rows [r0, r0 + rows) run past the end of a head? */
FL_HD static inline int straddles(Causal c, int r0, int rows)
{
    return r0 % c.Tq + rows > c.Tq;
}

/* The tile's lowest and furthest rows (by position): a straddling tile covers every position. */
FL_HD static inline int lowest_row(Causal c, int r0, int rows)
{
    return straddles(c, r0, rows) ? 0 : r0 % c.Tq;
}
FL_HD static inline int furthest_row(Causal c, int r0, int rows)
{
    return straddles(c, r0, rows) ? c.Tq - 1 : r0 % c.Tq + rows - 1;
}

/* The keys the tile's furthest row sees: the tile's K/V walk ends there. */
FL_HD static inline int tile_keys_seen(Causal c, int r0, int rows)
{
    return keys_seen(c, furthest_row(c, r0, rows));
}

/* The first key tile start t >= kv0 (a multiple of `tile`) holding a key some row of the query
 * tile [r0, r0 + rows) sees, or >= Tk when there is none. The rows see the sinks [0, se) of the
 * furthest row and the window run [lo, hi) from the lowest row's start to the furthest row's end:
 * the walk visits the sink tiles, then jumps to the band. */
FL_HD static inline int next_key_tile(Causal c, int r0, int rows, int kv0, int tile)
{
    const int far = furthest_row(c, r0, rows), hi = keys_seen(c, far);
    if (kv0 < sinks_end(c, far))
        return kv0;
    const int band = window_start(c, lowest_row(c, r0, rows)) / tile * tile;
    const int t = kv0 > band ? kv0 : band;
    return t < hi ? t : c.Tk;
}

/* The first query tile start t >= r0 (in steps of `tile` rows, R rows in all) with a row that
 * sees a key of [kv0, kv0 + n), or R when none does. Per head, the positions that see such a key
 * are one run [p_first, p_end): p >= kv0 - offset (past the diagonal), and, with a window and no
 * sink token in the tile, p < kv0 + n - 1 + W - offset (the window still reaches the tile). The
 * backward's walk over the query tiles jumps from run to run. */
FL_HD static inline int next_tile_seeing(Causal c, int r0, int tile, int R, int kv0, int n)
{
    if (!c.on)
        return r0;
    const int p_first = clamp_int(kv0 - c.offset, 0, c.Tq);
    const int p_end = c.window > 0 && kv0 >= c.sink_tokens
                          ? clamp_int(kv0 + n - 1 + c.window - c.offset, 0, c.Tq)
                          : c.Tq;
    if (p_first >= p_end || r0 >= R)
        return R;
    const int head = r0 / c.Tq * c.Tq; /* first packed row of r0's head */
    int first = r0 < head + p_end ? head + p_first : head + c.Tq + p_first;
    if (first < r0)
        first = r0;
    const int t = first / tile * tile;
    return first >= R ? R : t > r0 ? t : r0;
}

/* Does the pair (packed rows [r0, r0 + rows), keys [kv0, kv0 + n)) need the mask, i.e. may some
 * row miss some key? The pair is fully visible when every key is before the lowest row's end and
 * either after the furthest row's window start or among the lowest row's sink tokens. */
FL_HD static inline int crosses(Causal c, int r0, int rows, int kv0, int n)
{
    const int low = lowest_row(c, r0, rows), far = furthest_row(c, r0, rows);
    const int before_end = kv0 + n <= keys_seen(c, low);
    const int in_window = kv0 >= window_start(c, far);
    const int in_sinks = kv0 + n <= sinks_end(c, low);
    return c.on && !(before_end && (in_window || in_sinks));
}

#endif
