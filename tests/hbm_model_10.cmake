# HBM-model test of stage 10 (sliding window, sink tokens, learned sinks), CPU and CUDA: the
# forward and backward counters and workspace of all five implementations equal the closed forms
# of docs/hbm_model.md (the K/V tiles a query tile loads, the query tiles a K/V tile's backward
# visits, derived key by key from docs/conventions.md), outputs and gradients (dsinks too) checked against
# the float64 reference; the O(T (W + S)) law of the flash rows (linear in T at W = 64, ~4x for the
# causal run without a window); and W >= T equals stage 08's causal counters.
add_hbm_model_test(10 swa_sinks)
