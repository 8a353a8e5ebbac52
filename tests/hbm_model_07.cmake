# HBM-model test of stage 07 (causal), CPU and CUDA: the forward and backward counters and workspace
# equal the closed forms of docs/hbm_model.md with the causal mask on (flash and naive variants,
# several shapes, two M for the CPU flash row), outputs and gradients checked against a float64
# reference; and causal flash traffic is about half of the same implementation without the mask.
add_hbm_model_test(07 causal)
