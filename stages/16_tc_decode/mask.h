/* stages/16_tc_decode/mask.h — stage 11's mask, unchanged: stage 10's mask per sequence, causal
 * (bottom-right aligned), a sliding window of W keys and S sink tokens (docs/conventions.md), over
 * the packed query rows of a GQA group.
 * reference.c and the kernel both include it, so the CPU and the GPU mask with the same integer
 * arithmetic. New in stage 11: each sequence b of a batch has its own length, so the mask is made
 * per sequence (Tk = seq_lens[b]); the Tq queries sit at the sequence's last Tq positions.
 *
 * Packed rows (stage 08): the group = Hq / Hkv query heads that read one kv head form one matrix
 * of R = group * Tq rows; packed row r is at position p = r % Tq + Tk - Tq.
 * New in stage 10: the keys row p sees are no longer a prefix but up to two runs:
 *   the window   [lo, hi)  with hi = p + 1 (clamped to [0, Tk]) and lo = hi - W (W > 0), else 0
 *   the sinks    [0, se)   with se = min(S, hi): the first S keys stay visible (StreamingLLM)
 * A window implies causal; without a window, sink tokens change nothing (they are inside [0, hi)).
 * When Tq > Tk the first Tq - Tk rows of every head see no key at all.
 * Stage 11 reads only the keys some row of a query block sees (paged.h: key_span) and masks
 * them key by key (sees). With `on` false every row sees every key. */
#ifndef FLASHLAB_STAGE16_MASK_H
#define FLASHLAB_STAGE16_MASK_H

#include "host_device.h"

typedef struct {
    int on;      /* causal (a window implies it) */
    int offset;  /* Tk - Tq: the position of query row 0 */
    int Tk;
    int Tq;      /* rows per query head: packed row r is row r % Tq of its head */
    int window;  /* W > 0: keep keys p - W < j <= p; 0 = no window */
    int sink_tokens; /* S: keep keys j < S as well (still j <= p) */
} Causal;

FL_HD static inline Causal causal_make(int on, int Tq, int Tk, int window, int sink_tokens)
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
    const int hi = !c.on ? c.Tk : clamp_int(row % c.Tq + c.offset + 1, 0, c.Tk);
    const int lo = c.window > 0 ? clamp_int(hi - c.window, 0, c.Tk) : 0;
    KeyRuns k = {lo, hi, c.sink_tokens < hi ? c.sink_tokens : hi};
    return k;
}

/* Does a row with runs k see key `key`? */
FL_HD static inline int sees(KeyRuns k, int key)
{
    return key < k.hi && (key >= k.lo || key < k.se);
}

/* How many keys a row with runs k sees: the window run plus the sink tokens before it. */
FL_HD static inline int visible_count(KeyRuns k)
{
    return k.hi - k.lo + (k.se < k.lo ? k.se : k.lo);
}

/* What a tile of packed rows [r0, r0 + rows) sees, through its lowest and its furthest row (by
 * position; every other row's runs lie between theirs). A tile that runs past the end of a head
 * covers every position: its lowest row is position 0, its furthest Tq - 1. */
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

#endif
