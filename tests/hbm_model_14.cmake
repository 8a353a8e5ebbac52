# HBM-model test of stage 14 (bf16 on Hopper), CPU reference and CUDA kernels: the forward and
# backward counters and workspace equal the one closed form of docs/hbm_model.md ("Stage 14"; tiles
# of 128 query rows and 128 keys forward, 64 query rows and 128 keys backward, dq added per 64 keys),
# on the shapes of stage 12's test; outputs and gradients within the bf16 tolerance of a float64
# reference. The CUDA test is skipped (77) in a build without sm_90a or on a GPU that is not Hopper.
add_hbm_model_test(14 hopper)
target_sources(test_hbm_model_14 PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/hbm_model_tc.c) # the shared problems and check
