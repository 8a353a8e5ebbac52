# IO plant of stage 11 (CPU): every query block gathers all the keys of its sequence, not only the
# span its rows can see (the sink tokens and the window's band). mask_keys hides the others, so o
# and lse stay right; the reads grow from O(W + S) keys to the sequence length.
sed -i 's|^    const KeySpan span = key_span(tile_runs(causal, (int)i0, (int)rows));$|    const KeySpan span = {0, causal.Tk, causal.Tk, causal.Tk};|' decode.c
