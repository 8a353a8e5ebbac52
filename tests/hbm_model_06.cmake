# HBM-model test of stage 06 (backward), CPU and CUDA: the backward pass's counters and workspace equal the
# closed forms of docs/hbm_model.md for the flash and naive variants, on several shapes and two M,
# with the gradients checked against a float64 reference.
add_unit_test(test_hbm_model_06)
add_test(NAME stage06_backward_hbm_cpu COMMAND test_hbm_model_06 cpu)
set_tests_properties(stage06_backward_hbm_cpu PROPERTIES LABELS "stage06;cpu")
if(FLASHLAB_HAVE_CUDA)
  add_test(NAME stage06_backward_hbm_cuda COMMAND test_hbm_model_06 cuda)
  set_tests_properties(stage06_backward_hbm_cuda PROPERTIES LABELS "stage06;gpu" SKIP_RETURN_CODE 77)
endif()
