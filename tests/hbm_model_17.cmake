# HBM-model test of stage 17 (MLA in bf16): counters and workspace equal the closed form of
# docs/hbm_model.md ("Stage 17") on four shapes with 1, 2 and 5 splits, CPU reference and CUDA
# kernel (whose step differs from the reference's in the RoPE pass and the scratch: the doc says
# how). The cuda test skips (77) without a device or in a build without sm_90a.
add_unit_test(test_hbm_model_17)
add_test(NAME stage17_tc_mla_hbm_cpu COMMAND test_hbm_model_17 cpu)
set_tests_properties(stage17_tc_mla_hbm_cpu PROPERTIES LABELS "stage17;cpu")
if(FLASHLAB_HAVE_CUDA)
  add_test(NAME stage17_tc_mla_hbm_cuda COMMAND test_hbm_model_17 cuda)
  set_tests_properties(stage17_tc_mla_hbm_cuda PROPERTIES LABELS "stage17;gpu" SKIP_RETURN_CODE 77)
endif()
