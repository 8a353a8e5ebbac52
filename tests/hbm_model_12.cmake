# HBM-model test of stage 12 (bf16 on tensor cores), CPU reference and CUDA kernels: the forward
# and backward counters and workspace equal the one closed form of docs/hbm_model.md (bf16 inputs
# 2 bytes, float32 outputs; tiles of 128 and 64 query rows, 64 keys), on causal and full masks,
# GQA and MQA, odd T, Tq > Tk and Tq < Tk, T = 1, d = 64 and 128; outputs and gradients within the
# bf16 tolerance of a float64 reference.
add_hbm_model_test(12 tensor_cores)
target_sources(test_hbm_model_12 PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/hbm_model_tc.c) # the shared problems and check
