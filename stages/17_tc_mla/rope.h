/* stages/17_tc_mla/rope.h — stage 09's two index rules, unchanged: RoPE and the stacked rows.
 *
 * RoPE on the decoupled query part q_pe (width p, even): the interleaved pairs (x[2t], x[2t+1]),
 * t < p/2, of a query at position pos are rotated by the angle pos * theta^(-2t/p). The key part
 * kpe arrives already rotated (it was rotated when its token entered the cache).
 *
 * Positions and the causal mask of the latent attention. The absorbed variant attends with the
 * query rows of all H heads of a token stacked together: row r of a batch's (Tq * H) rows is head
 * r % H of new token r / H, at position Tk - Tq + r / H, and under the causal mask it sees the
 * keys j <= that position (bottom-right alignment, as in stage 07). */
#ifndef FLASHLAB_STAGE17_ROPE_H
#define FLASHLAB_STAGE17_ROPE_H

#include <math.h>

#include "host_device.h"

/* Rotates the pairs of one query's RoPE part x (p floats) in place. */
FL_HD static inline void rope_rotate(float *x, int p, int pos, float theta)
{
    for (int t = 0; t < p / 2; t++) {
        const float angle = (float)pos * powf(theta, -2.0f * (float)t / (float)p);
        const float c = cosf(angle), s = sinf(angle), x0 = x[2 * t], x1 = x[2 * t + 1];
        x[2 * t] = x0 * c - x1 * s;
        x[2 * t + 1] = x0 * s + x1 * c;
    }
}

/* The position of stacked row r (head r % H of token r / H). */
FL_HD static inline int row_position(int r, int H, int Tq, int Tk) { return Tk - Tq + r / H; }

/* How many keys stacked row r sees: all Tk, or under the causal mask the keys up to its position. */
FL_HD static inline int keys_seen(int causal, int r, int H, int Tq, int Tk)
{
    return causal ? row_position(r, H, Tq, Tk) + 1 : Tk;
}

#endif
