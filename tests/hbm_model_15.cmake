# HBM-model test of stage 15 (bf16 window + sink tokens + learned sinks on the tensor-core track):
# the forward and backward counters and workspace of the CPU reference equal the closed form of
# docs/hbm_model.md ("Stage 15"), the tiles a walk visits derived key by key from
# docs/conventions.md; outputs and gradients (dsinks too) within the bf16 tolerance of a float64
# reference; and with W >= T and neither sink tokens nor sinks, stage 12's counters. CPU only: the
# stage's CUDA kernels come later, and a cuda test with no row to run would pass having run nothing;
# their row and stage15_tc_window_sinks_hbm_cuda (add_hbm_model_test) come with them.
add_unit_test(test_hbm_model_15)
target_sources(test_hbm_model_15 PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/hbm_model_driver.c)
add_test(NAME stage15_tc_window_sinks_hbm_cpu COMMAND test_hbm_model_15 cpu)
set_tests_properties(stage15_tc_window_sinks_hbm_cpu PROPERTIES LABELS "stage15;cpu")
