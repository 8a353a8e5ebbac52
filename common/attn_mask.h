/* attn_mask.h — which keys a query row keeps: the rule of docs/conventions.md (bottom-right causal,
 * a sliding window of W keys, S sink tokens) for one packed query row of a GQA group, on the host
 * and on the device. The stages teach the same rule in their own mask.h, where it is the lesson
 * and is classified tile by tile; this copy serves the code that is no lesson, the naive paths
 * (common/cuda_naive.cu with cuBLAS, common/cpu_naive.c with OpenBLAS), which apply it element by
 * element.
 *
 * Packed rows (stage 08): the G = Hq / Hkv query heads of one kv head form R = G * Tq rows, and
 * packed row r sits at position p = r % Tq + Tk - Tq. With the mask on, row p keeps keys j <= p;
 * a window W > 0 also drops j <= p - W, and the first S keys stay (still j <= p). Without the mask
 * every row keeps every key. A window implies the mask. */
#ifndef FLASHLAB_ATTN_MASK_H
#define FLASHLAB_ATTN_MASK_H

#include "host_device.h"

typedef struct {
    int on;          /* causal (a window implies it) */
    int offset;      /* Tk - Tq: the position of query row 0 */
    int Tq, Tk;      /* rows per query head; keys */
    int window;      /* W > 0: keep keys p - W < j <= p */
    int sink_tokens; /* S: keep keys j < S as well (still j <= p) */
} AttnMask;

/* The keys one row keeps: the run [lo, hi) and the sink run [0, se). */
typedef struct {
    int lo, hi, se;
} AttnRowKeys;

FL_HD static inline AttnMask attn_mask_make(int causal, int Tq, int Tk, int window, int sink_tokens)
{
    AttnMask m = {causal != 0 || window > 0, Tk - Tq, Tq, Tk, window, sink_tokens};
    return m;
}

FL_HD static inline int attn_clamp(int x, int lo, int hi) { return x < lo ? lo : x > hi ? hi : x; }

FL_HD static inline AttnRowKeys attn_row_keys(AttnMask m, int packed_row)
{
    const int hi = !m.on ? m.Tk : attn_clamp(packed_row % m.Tq + m.offset + 1, 0, m.Tk);
    const int lo = m.window > 0 ? attn_clamp(hi - m.window, 0, m.Tk) : 0;
    AttnRowKeys k = {lo, hi, m.sink_tokens < hi ? m.sink_tokens : hi};
    return k;
}

FL_HD static inline int attn_row_keeps(AttnRowKeys k, int key)
{
    return key < k.hi && (key >= k.lo || key < k.se);
}

/* How many keys the row keeps: its window run plus the sink tokens before it. */
FL_HD static inline int attn_row_count(AttnRowKeys k)
{
    return k.hi - k.lo + (k.se < k.lo ? k.se : k.lo);
}

#endif
