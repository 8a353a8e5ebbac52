/* stages/16_tc_decode/paged.h — stage 11's two ideas as index rules, as they were, shared by
 * reference.c and the kernel (FL_HD: host and device).
 *
 * 1. Where a key lives. A paged KV cache (vLLM's PagedAttention) stores keys in fixed pages of
 *    page_size slots, handed out from one pool: k_pages (P, page_size, Hkv, d). Sequence b's key j
 *    is in page block_table[b, j / page_size], slot j % page_size, and sequence b holds
 *    seq_lens[b] keys. A contiguous cache (B, Hkv, Tk, d) is the special case page_size = 0 here:
 *    every sequence has Tk keys in a row of its own.
 *
 * 2. Who reads which keys. At decode time a (sequence, kv head) has only group * Tq query rows but
 *    thousands of keys, so the keys it sees are split into `splits` chunks, one per thread block
 *    (or CPU work item). Each chunk yields a partial (O_s, lse_s) over its keys; a combine step
 *    merges them (split-KV, "flash-decoding"). The keys a query block sees form at most two runs,
 *    the sink tokens and the window band (mask.h); they are numbered 0 .. count-1 across both runs
 *    (KeySpan), and split s takes the numbers [s * chunk, (s + 1) * chunk), chunk = ceil(count /
 *    splits). So a window of W keys is split, not the whole sequence, and no split reads a key no
 *    row sees. */
#ifndef FLASHLAB_STAGE16_PAGED_H
#define FLASHLAB_STAGE16_PAGED_H

#include <stddef.h>

#include "attn.h"
#include "host_device.h"
#include "mask.h"

/* Rows that read one kv head: its group's query heads, stacked (R = group * Tq, stage 08). */
FL_HD static inline int packed_rows(const AttnProblem *p) { return p->Hq / p->Hkv * p->Tq; }

/* Rows of o and lse: B * Hq * Tq, in the packed order (kv head g's R rows start at g * R). */
FL_HD static inline size_t output_rows(const AttnProblem *p) { return (size_t)p->B * p->Hq * p->Tq; }

/* Keys of sequence b. */
FL_HD static inline int seq_keys(const AttnProblem *p, int b)
{
    return p->page_size > 0 ? p->seq_lens[b] : p->Tk;
}

/* The page holding key j of sequence b (paged caches only). */
FL_HD static inline int page_of(const AttnProblem *p, int b, int j)
{
    return p->block_table[(size_t)b * p->max_pages + j / p->page_size];
}

/* Where key j of kv head kvh of sequence b starts in k (width = d) or v (width = dv). */
FL_HD static inline size_t kv_offset(const AttnProblem *p, int b, int kvh, int j, int width)
{
    if (p->page_size == 0)
        return (((size_t)b * p->Hkv + kvh) * p->Tk + j) * width;
    const size_t slot = (size_t)page_of(p, b, j) * p->page_size + j % p->page_size;
    return (slot * p->Hkv + kvh) * width;
}

/* The keys some row of a query block sees, as two runs [a0, a1) and [b0, b1) (b0 >= a1): the sink
 * tokens [0, se) of its furthest row and the band [lo, hi) from its lowest row's window start to
 * its furthest row's end. When they touch or there are no sink tokens, one run (b0 = b1). */
typedef struct {
    int a0, a1, b0, b1;
} KeySpan;

FL_HD static inline KeySpan key_span(TileRuns t)
{
    const int se = t.far.se, lo = t.low.lo, hi = t.far.hi;
    KeySpan s;
    if (se > 0 && lo > se) { /* sinks, a gap, then the band */
        s.a0 = 0, s.a1 = se, s.b0 = lo, s.b1 = hi;
    } else {
        s.a0 = se > 0 ? 0 : lo, s.a1 = hi, s.b0 = s.b1 = hi;
    }
    return s;
}

FL_HD static inline int span_count(KeySpan s) { return (s.a1 - s.a0) + (s.b1 - s.b0); }

/* The position of the k-th key of the span (0 <= k < span_count). */
FL_HD static inline int span_key(KeySpan s, int k)
{
    const int first_run = s.a1 - s.a0;
    return k < first_run ? s.a0 + k : s.b0 + (k - first_run);
}

/* Split s of `splits` takes the span's keys numbered [first, end); late splits may be empty. */
typedef struct {
    int first, end;
} Chunk;

FL_HD static inline Chunk split_chunk(int count, int splits, int s)
{
    const int chunk = (count + splits - 1) / splits;
    Chunk c;
    c.first = s * chunk < count ? s * chunk : count;
    c.end = c.first + chunk < count ? c.first + chunk : count;
    return c;
}

/* The most keys one query block can see: the span of a whole sequence of Tk keys (the longest),
 * which bounds every block's. */
static inline int longest_span(const AttnProblem *p)
{
    const Causal whole = causal_make(p->causal, p->Tq, p->Tk, p->window, p->sink_tokens);
    return span_count(key_span(tile_runs(whole, 0, packed_rows(p))));
}

/* Work items before splitting: (sequence, kv head, query block of Br packed rows). */
static inline long query_blocks(const AttnProblem *p, int Br)
{
    return (long)p->B * p->Hkv * ((packed_rows(p) + Br - 1) / Br);
}

/* The workspace of `splits` splits: every output row's partial O_s (dv floats) and lse_s, or
 * nothing with one split (it writes o and lse directly). */
static inline size_t partials_bytes(const AttnProblem *p, int splits)
{
    return splits > 1 ? (size_t)splits * output_rows(p) * (size_t)(p->dv + 1) * sizeof(float) : 0;
}

/* The split heuristic. `units` workers (the GPU's resident blocks, the CPU's threads) run the
 * items * splits work items in rounds of `units`; a last round that is only partly full wastes the
 * rest. The fill of splits s is items*s / (rounds * units). Take the best fill over s = 1 .. most,
 * then the fewest splits within 85% of it (each split costs a partial O and lse written and read
 * back). `most` keeps every split at least min_keys keys long, and at most 256. */
static inline int split_count(long items, int units, int max_keys, int min_keys)
{
    long most = ((long)max_keys + min_keys - 1) / min_keys;
    most = most < 1 ? 1 : most > 256 ? 256 : most;
    double fill[257], best = 0.0;
    for (long s = 1; s <= most; s++) {
        const long work = items * s, rounds = (work + units - 1) / units;
        fill[s] = (double)work / (double)(rounds * units);
        best = fill[s] > best ? fill[s] : best;
    }
    for (long s = 1; s <= most; s++)
        if (fill[s] >= 0.85 * best)
            return (int)s;
    return 1;
}

#endif
