# HBM-model test of stage 16 (stage 11's paged split-KV decode in bf16 on the tensor-core track):
# counters and workspace equal the closed form of docs/hbm_model.md ("Stage 16") for 1, 2 and 5
# splits on paged and contiguous caches (ragged lengths, page sizes 1, 5 and 16, GQA up to 32
# packed rows, Tq = 1, 3 and 4, window, sink tokens, learned sinks), and o, lse within the bf16
# tolerance of a float64 reference per sequence, also at the stage's own split count. The cuda test
# skips (77) without a device.
add_hbm_model_test(16 tc_decode)
