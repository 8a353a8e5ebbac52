/* stages/10_swa_sinks/mask.h — the mask of stage 10: causal (bottom-right aligned), a sliding
 * window of W keys and S sink tokens (docs/conventions.md), over the packed query rows of a GQA group.
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
 *   crossing        some row misses some key: computed, then masked key by key (sees)
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

/* The keys one row sees: the window run [lo, hi) and the sink run [0, se). */
typedef struct {
    int lo, hi, se;
} KeyRuns;

/* The runs of packed row `row`: hi = p + 1 (keys j <= p, at most Tk), lo = hi - W with a window
 * (else 0), se = min(S, hi). Without the causal mask every row sees every key. */
FL_HD static inline KeyRuns row_runs(Causal c, int row)
{
    /* exercise: begin — row_runs: the keys packed row `row` sees, as two runs: the window [lo, hi) with hi = its position + 1 clamped to [0, Tk] and lo = hi - W with a window (else 0), and the sink tokens [0, se) with se = min(S, hi); without the mask every key, [0, Tk) (check 10: o and lse of the causal*, window* and sink_tokens* cases) | stub: KeyRuns k = {0, c.Tk + 0 * row, 0}; return k; */
    const int hi = !c.on ? c.Tk : clamp_int(row % c.Tq + c.offset + 1, 0, c.Tk);
    const int lo = c.window > 0 ? clamp_int(hi - c.window, 0, c.Tk) : 0;
    KeyRuns k = {lo, hi, c.sink_tokens < hi ? c.sink_tokens : hi};
    return k;
    /* exercise: end */
}

/* Does a row with runs k see key `key`? */
FL_HD static inline int sees(KeyRuns k, int key)
{
    /* exercise: begin — sees: does a row with runs k see `key`? Only keys before hi, and of those the ones in the window run or among the sink tokens (check 10: o and lse of the window* cases, window_sink_tokens among them) | stub: return key < k.hi; */
    return key < k.hi && (key >= k.lo || key < k.se);
    /* exercise: end */
}

/* How many keys a row with runs k sees: the window run plus the sink tokens before it. */
FL_HD static inline int visible_count(KeyRuns k)
{
    return k.hi - k.lo + (k.se < k.lo ? k.se : k.lo);
}

/* What a tile of packed rows [r0, r0 + rows) sees, through its lowest and its furthest row (by
 * position; every other row's runs lie between theirs). A tile that runs past the end of a head
 * covers every position: its lowest row is position 0, its furthest Tq - 1. Computed once per
 * query tile; the per-key-tile decisions below are then a few comparisons. */
typedef struct {
    KeyRuns low, far;
} TileRuns;

FL_HD static inline TileRuns tile_runs(Causal c, int r0, int rows)
{
    const int first = r0 % c.Tq, straddles = first + rows > c.Tq;
    const int low = straddles ? 0 : first, far = straddles ? c.Tq - 1 : first + rows - 1;
    TileRuns t = {row_runs(c, low), row_runs(c, far)};
    return t;
}

/* The first key tile start kv >= kv0 (a multiple of `tile`) holding a key some row of the query
 * tile sees, or >= far.hi when there is none (the walk ends at far.hi). The rows see the sinks
 * [0, far.se) and the window keys [low.lo, far.hi): the walk visits the sink tiles, then jumps
 * to the band. */
FL_HD static inline int next_key_tile(TileRuns t, int kv0, int tile)
{
    /* exercise: begin — next_key_tile: the start of the K/V tile the query tile's walk visits next, from kv0 on: kv0 itself while it is among the sink tokens some row sees (kv0 < far.se), else the band: the tile holding the lowest row's window start low.lo, or kv0 once past it; the tiles in between are never loaded (check 10: o and lse of every case, and window_sinks_t512 with no IO FAIL: its hbm read equals the reference's) | stub: (void)kv0, (void)tile; return t.far.hi; */
    if (kv0 < t.far.se)
        return kv0;
    const int band = t.low.lo / tile * tile;
    return kv0 > band ? kv0 : band;
    /* exercise: end */
}

/* Does the pair (query tile t, keys [kv0, kv0 + n)) need the mask, i.e. may some row miss some
 * key? It is fully visible when every key is before the lowest row's end and either after the
 * furthest row's window start or among the lowest row's sink tokens. */
FL_HD static inline int crosses(Causal c, TileRuns t, int kv0, int n)
{
    const int before_end = kv0 + n <= t.low.hi;
    const int in_window = kv0 >= t.far.lo, in_sinks = kv0 + n <= t.low.se;
    return c.on && !(before_end && (in_window || in_sinks));
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
    /* exercise: begin — next_tile_seeing: the first query tile start >= r0 (steps of `tile` rows) with a row that sees a key of [kv0, kv0 + n), else R. Per head those rows are the positions [p_first, p_end), clamped to [0, Tq]: from the diagonal, p_first = kv0 - offset, to where the window stops reaching the tile, p_end = kv0 + n - 1 + W - offset (the head's end without a window or when the tile holds a sink token); the next such row is in r0's head or the next one (check 10: dq, dk and dv of the causal and window backward cases, and window_sinks_t512 with no IO FAIL) | stub: (void)tile, (void)kv0, (void)n; return R; */
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
    /* exercise: end */
}

#endif
