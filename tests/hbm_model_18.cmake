# HBM-model test of stage 18 (stage 14's Hopper kernels with a sliding window, sink tokens and
# learned sinks): the forward and backward counters and workspace of the CPU reference and of the
# kernels equal the closed form of docs/hbm_model.md ("Stage 18"), the tiles a walk visits and the
# dq shares it adds derived key by key from docs/conventions.md; outputs and gradients (dsinks too)
# within the bf16 tolerance of a float64 reference; and with W >= T and neither sink tokens nor
# sinks, stage 14's counters but for the keys of its wider forward tiles and the dq shares stage 18
# skips. The cuda test skips (77) without a device, in a build without sm_90a or on a GPU that is
# not Hopper.
add_hbm_model_test(18 hopper_window_sinks)
target_sources(test_hbm_model_18 PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/hbm_model_tc.c) # the shared check
