/* stages/13_ring/split.h — the balanced split of stage 13, and where a rank's rows live.
 *
 * ring.c (CPU ranks), ring.cu (GPU ranks) and the one-process-per-GPU launcher (launch/ring_rank.cu)
 * all cut the sequence with these two functions, so the three agree on which rows each rank holds.
 *
 * The rows of a sequence (Tq for the queries, Tk for the keys) are cut into 2P chunks, chunk c being
 * [c n / 2P, (c + 1) n / 2P); rank r holds chunk r, its chunk `which` = 0, and chunk 2P - 1 - r, its
 * chunk `which` = 1. Under the causal mask chunk c sees about c + 1/2 chunks of keys, so every rank
 * gets (r + 1/2) + (2P - 1 - r + 1/2) = 2P chunk pairs of work (README.md: the balanced split).
 *
 * A rank's share on a GPU (ring.cu and the launcher) is chunk-major: a tensor the rank owns holds
 * its chunk-0 rows of every head, then its chunk-1 rows of every head:
 *   q, o, lse, dO, dq:    (which, B, Hq,  rows of its query chunk `which`, d | dv | 1)
 *   k, v, dk, dv:         (which, B, Hkv, rows of its key chunk `which`,   d | dv)
 * The K/V part is the rank's shard, in the layout ring.c's Shard uses. In each chunk the rows of one
 * head are contiguous, and so are the rows of the query heads that share a kv head: stage 08's
 * packed rows, chunk by chunk. */
#ifndef FLASHLAB_STAGE13_SPLIT_H
#define FLASHLAB_STAGE13_SPLIT_H

#include <stddef.h>

#include "host_device.h"

/* Rows [lo, hi) of one chunk. */
typedef struct {
    size_t lo, hi;
} Rows;

/* Chunk c of n rows cut into 2P chunks. */
FL_HD static inline Rows chunk_rows(size_t n, int P, int c)
{
    Rows r = {n * (size_t)c / (size_t)(2 * P), n * (size_t)(c + 1) / (size_t)(2 * P)};
    return r;
}

/* The two chunks rank r holds: r and 2P - 1 - r. */
FL_HD static inline int rank_chunk(int P, int r, int which) { return which == 0 ? r : 2 * P - 1 - r; }

/* Everything a rank holds: its two query chunks (of Tq rows) and its two key chunks (of Tk rows). */
typedef struct {
    Rows q[2], k[2];
} RankRows;

static inline RankRows rank_rows(int Tq, int Tk, int P, int r)
{
    RankRows x;
    for (int which = 0; which < 2; which++) {
        x.q[which] = chunk_rows((size_t)Tq, P, rank_chunk(P, r, which));
        x.k[which] = chunk_rows((size_t)Tk, P, rank_chunk(P, r, which));
    }
    return x;
}

/* Rows in a pair of chunks. */
static inline size_t rows_of(const Rows c[2]) { return (c[0].hi - c[0].lo) + (c[1].hi - c[1].lo); }

/* In a chunk-major share of `heads` heads and `width` floats per row: where chunk `which` starts
 * (in floats), and how many floats the share holds. */
static inline size_t share_offset(const Rows c[2], int which, size_t heads, size_t width)
{
    return which == 0 ? 0 : (c[0].hi - c[0].lo) * heads * width;
}

static inline size_t share_numel(const Rows c[2], size_t heads, size_t width)
{
    return rows_of(c) * heads * width;
}

#endif
