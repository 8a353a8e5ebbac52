# HBM-model test of stage 15 (bf16 window + sink tokens + learned sinks on the tensor-core track):
# the forward and backward counters and workspace of the CPU reference and of the kernels equal the
# closed form of docs/hbm_model.md ("Stage 15"), the tiles a walk visits derived key by key from
# docs/conventions.md; outputs and gradients (dsinks too) within the bf16 tolerance of a float64
# reference; and with W >= T and neither sink tokens nor sinks, stage 12's counters. The cuda test
# skips (77) without a device.
add_hbm_model_test(15 tc_window_sinks)
target_sources(test_hbm_model_15 PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/hbm_model_tc.c) # the shared check
