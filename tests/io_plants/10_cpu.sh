# IO plant of stage 10 (CPU): both passes walk every tile instead of only those a window or a sink
# reaches: the forward every K/V tile from key 0 (not the sink tiles and the band), the backward
# every Q block for each K/V tile. The mask still hides the keys outside the window (such tiles
# count as crossing), so every output stays right; the reads grow from O(W + S) keys per row to O(Tk).
sed -i 's|^    for (size_t j0 = (size_t)next_key_tile(tile, 0, (int)Bc); j0 < Tk;$|    for (size_t j0 = 0; j0 < Tk;|; s|^         j0 = (size_t)next_key_tile(tile, (int)(j0 + Bc), (int)Bc)) {$|         j0 += Bc) {|' swa_sinks.c
sed -i 's|^        for (size_t i0 = (size_t)next_tile_seeing(causal, 0, tile, rows, kv0, nk); i0 < R;$|        for (size_t i0 = 0; i0 < R;|; s|^             i0 = (size_t)next_tile_seeing(causal, (int)i0 + tile, tile, rows, kv0, nk))$|             i0 += Br)|' swa_sinks.c
