/* tiles.h — what stage 18's kernels and its CPU reference share: stage 14's tile sizes (the
 * reference rounds P to bf16 after the same running maximum the kernel has, so it walks the keys in
 * the same tiles), and stage 15's mask of a sliding window with sink tokens, as integer functions
 * both sides call, so that the reference walks exactly the tiles the kernels walk. */
#ifndef FLASHLAB_STAGE18_TILES_H
#define FLASHLAB_STAGE18_TILES_H

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
#define TC_FWD_BLOCK_C 64  /* keys per K/V tile in the forward: stage 14 takes 128 (one wgmma N);
                              with a window most tiles sit on the band's edge, and half as wide a
                              tile walks half as many keys no row sees (README, "How fast") */
#define TC_BWD_BLOCK_R 64 /* query rows per Q tile in the backward */

/* The mask of one head (docs/conventions.md): query row i sits at position p = i + Tk - Tq. With
 * `causal` it sees keys j <= p; a window W > 0 (which turns causal on) keeps only p - W < j of
 * those, and S sink tokens reopen j < S (still j <= p). */
typedef struct {
    int causal; /* on whenever window > 0 */
    int Tq, Tk;
    int window;      /* W, 0 = none */
    int sink_tokens; /* S, 0 = none */
} TcMask;

/* The keys a row sees, as two runs: the band [lo, hi) and the sink tokens [0, se). Without the
 * causal mask the band is every key and there are no sink tokens to reopen. */
typedef struct {
    int lo, hi, se;
} TcRuns;

FL_HD static inline int tc_clamp(int x, int lo, int hi) { return x < lo ? lo : x > hi ? hi : x; }

/* Row i's runs: hi = p + 1 clamped to [0, Tk] (stage 14's causal end), lo = hi - W with a window,
 * se = min(S, hi). A row with hi = 0 (Tq > Tk) sees no key at all. */
FL_HD static inline TcRuns tc_row_runs(TcMask m, int i)
{
    TcRuns r = {0, m.Tk, 0};
    if (!m.causal)
        return r;
    r.hi = tc_clamp(i + m.Tk - m.Tq + 1, 0, m.Tk);
    r.lo = m.window > 0 ? tc_clamp(r.hi - m.window, 0, m.Tk) : 0;
    r.se = m.sink_tokens < r.hi ? m.sink_tokens : r.hi;
    return r;
}

/* Does a row with runs r see key j? */
FL_HD static inline int tc_sees(TcRuns r, int j) { return j < r.hi && (j >= r.lo || j < r.se); }

/* How many keys a row with runs r sees: the band plus the sink tokens below it. */
FL_HD static inline int tc_visible(TcRuns r) { return r.hi - r.lo + (r.se < r.lo ? r.se : r.lo); }

/* Does every row from the one with runs `first` to the one with runs `last` (rows of one head, in
 * order) see every key of [j0, j0 + n)? The first row's band ends lowest and it has the fewest sink
 * tokens; the last row's band starts highest. A tile that is not whole this way is masked key by key. */
FL_HD static inline int tc_tile_whole(TcRuns first, TcRuns last, int j0, int n)
{
    return j0 + n <= first.hi && (j0 >= last.lo || j0 + n <= first.se);
}

/* The forward walk of a block of rows of one head, whose first row has runs `first` and last row
 * runs `last`, as numbered K/V tiles of TC_FWD_BLOCK_C keys: first the sink tiles (those starting
 * below the last row's se), then the band from the tile holding the first row's lo up to the last
 * row's hi; the tiles between the sinks and the band are never loaded. Step k of the walk is tile
 * tc_walk_tile(w, k), for k < w.steps. */
typedef struct {
    int sink_tiles; /* tiles 0 .. sink_tiles - 1 */
    int band0;      /* then tiles band0, band0 + 1, ... */
    int steps;      /* tiles in all */
} TcWalk;

FL_HD static inline TcWalk tc_fwd_walk(TcRuns first, TcRuns last)
{
    const int C = TC_FWD_BLOCK_C, end = (last.hi + C - 1) / C; /* one past the last row's last tile */
    TcWalk w;
    w.sink_tiles = (last.se + C - 1) / C;
    w.band0 = first.lo / C > w.sink_tiles ? first.lo / C : w.sink_tiles;
    w.steps = w.sink_tiles + (end > w.band0 ? end - w.band0 : 0);
    return w;
}

FL_HD static inline int tc_walk_tile(TcWalk w, int k) { return k < w.sink_tiles ? k : w.band0 + k - w.sink_tiles; }

/* The steps of walk w whose tile starts before key `hi`: the part of the walk a row whose band
 * ends at hi needs (the walk ascends, so they come first). */
FL_HD static inline int tc_walk_steps_below(TcWalk w, int hi)
{
    const int C = TC_FWD_BLOCK_C, end = (hi + C - 1) / C;
    const int sinks = end < w.sink_tiles ? end : w.sink_tiles;
    return sinks + (end > w.band0 ? end - w.band0 : 0);
}

/* The leading steps of walk w that rows from the one with runs `first` to the one with runs `last`
 * do not need (a warpgroup's rows inside a taller block): the band tiles that end at or before the
 * first row's band starts, as long as the rows see no sink token (sink tiles come first in the walk). */
FL_HD static inline int tc_walk_steps_unseen(TcWalk w, TcRuns first, TcRuns last)
{
    return last.se > 0 ? 0 : tc_walk_steps_below(w, first.lo / TC_FWD_BLOCK_C * TC_FWD_BLOCK_C);
}

/* The query rows [*first, *end) of a head that see some key of [j0, j0 + n), for the backward's walk
 * over the query tiles (and, with n = 1, the rows that see key j0): a row at position p sees one
 * when p >= j0 and, with a window, p < j0 + n - 1 + W (its band still reaches the keys) unless they
 * start with a sink token (j0 < S). Empty (*first >= *end) when no row does. */
FL_HD static inline void tc_rows_seeing(TcMask m, int j0, int n, int *first, int *end)
{
    if (!m.causal) {
        *first = 0, *end = m.Tq;
        return;
    }
    const int offset = m.Tk - m.Tq;
    *first = tc_clamp(j0 - offset, 0, m.Tq);
    *end = m.window > 0 && j0 >= m.sink_tokens ? tc_clamp(j0 + n - 1 + m.window - offset, 0, m.Tq) : m.Tq;
}

#endif
