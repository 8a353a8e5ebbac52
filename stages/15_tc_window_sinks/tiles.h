/* tiles.h — what stage 15's kernels and its CPU reference share: stage 12's tile
 * sizes, and the mask of a sliding window with sink tokens as integer functions both sides call,
 * so that the reference walks exactly the tiles the kernels will walk. */
#ifndef FLASHLAB_STAGE15_TILES_H
#define FLASHLAB_STAGE15_TILES_H

#include "host_device.h"

#define TC_BLOCK_R 128    /* query rows per forward thread block (8 warps x 16 rows) */
#define TC_BLOCK_C 64     /* keys per K/V tile (forward) and per backward thread block */
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

/* Row i's runs: hi = p + 1 clamped to [0, Tk] (stage 12's causal end), lo = hi - W with a window,
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

/* The forward walk of a block of rows of one head, whose first row has runs `first` and last row
 * runs `last` (the first row's band starts lowest, the last row's ends highest and has the most
 * sink tokens): the next K/V tile start >= j0 (a multiple of TC_BLOCK_C) that holds a key some row
 * sees: j0 itself while it is a sink tile, else the band from the tile holding first.lo. The walk
 * ends at last.hi; the tiles between the sinks and the band are never loaded. */
FL_HD static inline int tc_next_key_tile(TcRuns first, TcRuns last, int j0)
{
    if (j0 < last.se)
        return j0;
    const int band = first.lo / TC_BLOCK_C * TC_BLOCK_C;
    return j0 > band ? j0 : band;
}

/* The query rows [*first, *end) of a head that see some key of the tile [j0, j0 + n), for the
 * backward's walk over the query tiles: a row at position p sees one when p >= j0 and, with a
 * window, p < j0 + n - 1 + W (its band still reaches the tile) unless the tile holds a sink token
 * (j0 < S). Empty (*first >= *end) when no row does: the kernel then loads no K/V tile. */
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
