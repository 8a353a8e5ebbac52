# HBM-model tests of stage 05 (FlashAttention-2), CPU and CUDA: the counters equal the closed forms
# of docs/hbm_model.md, O and lse are written exactly once, and no workspace is used.
add_unit_test(test_hbm_model_05)
add_test(NAME stage05_fa2_hbm_cpu COMMAND test_hbm_model_05 cpu)
set_tests_properties(stage05_fa2_hbm_cpu PROPERTIES LABELS "stage05;cpu")
if(FLASHLAB_HAVE_CUDA)
  add_test(NAME stage05_fa2_hbm_cuda COMMAND test_hbm_model_05 cuda)
  set_tests_properties(stage05_fa2_hbm_cuda PROPERTIES LABELS "stage05;gpu" SKIP_RETURN_CODE 77)
endif()
