# HBM-model test of stage 07 (causal), CPU and CUDA: the forward and backward counters and workspace
# equal the closed forms of docs/hbm_model.md with the causal mask on (flash and naive variants,
# several shapes, two M for the CPU flash row), outputs and gradients checked against a float64
# reference; and causal flash traffic is about half of the same implementation without the mask.
add_unit_test(test_hbm_model_07)
add_test(NAME stage07_causal_hbm_cpu COMMAND test_hbm_model_07 cpu)
set_tests_properties(stage07_causal_hbm_cpu PROPERTIES LABELS "stage07;cpu")
if(FLASHLAB_HAVE_CUDA)
  add_test(NAME stage07_causal_hbm_cuda COMMAND test_hbm_model_07 cuda)
  set_tests_properties(stage07_causal_hbm_cuda PROPERTIES LABELS "stage07;gpu" SKIP_RETURN_CODE 77)
endif()
