# HBM-model test of stage 11 (decoding: split-KV over a paged KV cache), CPU and CUDA: counters and
# workspace equal the closed form of docs/hbm_model.md for 1, 2 and 5 splits on paged and
# contiguous caches (ragged lengths, page sizes 1..16, GQA, Tq = 1 and 3, window, sink tokens,
# learned sinks), and o, lse match a float64 reference per sequence, also at the stage's own split
# count.
add_hbm_model_test(11 decode)
