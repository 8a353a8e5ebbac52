# IO plant of stage 03 (CPU): K_j and V_j are loaded again for every Q block, inside the inner loop,
# though the arena already holds them from the outer loop. Same values, so o and lse stay right;
# the K/V reads grow by the number of Q blocks.
sed -i 's|^\(            hbm_load(hbm, s->Q, x.q + i0 \* d, rows \* d);   /\* Q_i  (rows, d) \*/\)$|\1\n            hbm_load(hbm, s->K, x.k + j0 * d, n * d), hbm_load(hbm, s->V, x.v + j0 * dv, n * dv);|' tiled.c
