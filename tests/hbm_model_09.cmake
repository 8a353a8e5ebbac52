# HBM-model test of stage 09 (MLA), CPU and CUDA: the counters and workspace of the absorbed and
# the naive variant equal the closed forms of docs/hbm_model.md (the naive variant's attention
# counted by stage 08 naive itself), on four shapes and two SRAM sizes; both variants give the same y.
add_hbm_model_test(09 mla)
