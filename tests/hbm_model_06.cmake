# HBM-model test of stage 06 (backward), CPU and CUDA: the backward pass's counters and workspace equal the
# closed forms of docs/hbm_model.md for the flash and naive variants, on several shapes and two M,
# with the gradients checked against a float64 reference.
add_hbm_model_test(06 backward)
