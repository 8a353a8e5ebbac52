# HBM-model tests of stage 05 (FlashAttention-2), CPU and CUDA: the counters equal the closed forms
# of docs/hbm_model.md, O and lse are written exactly once, and no workspace is used.
add_hbm_model_test(05 fa2)
