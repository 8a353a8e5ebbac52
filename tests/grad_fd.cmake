# The reference-free gradient check: an implementation's backward pass against central finite
# differences of its own forward pass (tests/test_grad_fd.c). Usage: test_grad_fd STAGE DEVICE [VARIANT].
# An implementation that supports the causal mask (stage 07 on) is checked with the mask on; one
# that supports GQA (stage 08 on) on grouped shapes (group 3, MQA) as well.
add_unit_test(test_grad_fd)
add_test(NAME stage06_backward_gradfd_cpu COMMAND test_grad_fd 06 cpu)
add_test(NAME stage06_backward_gradfd_cpu_naive COMMAND test_grad_fd 06 cpu naive)
set_tests_properties(stage06_backward_gradfd_cpu stage06_backward_gradfd_cpu_naive
                     PROPERTIES LABELS "stage06;cpu")
add_test(NAME stage07_causal_gradfd_cpu COMMAND test_grad_fd 07 cpu)
add_test(NAME stage07_causal_gradfd_cpu_naive COMMAND test_grad_fd 07 cpu naive)
set_tests_properties(stage07_causal_gradfd_cpu stage07_causal_gradfd_cpu_naive
                     PROPERTIES LABELS "stage07;cpu")
if(FLASHLAB_HAVE_CUDA)
  add_test(NAME stage06_backward_gradfd_cuda COMMAND test_grad_fd 06 cuda)
  add_test(NAME stage06_backward_gradfd_cuda_naive COMMAND test_grad_fd 06 cuda naive)
  add_test(NAME stage06_backward_gradfd_cuda_deterministic COMMAND test_grad_fd 06 cuda deterministic)
  set_tests_properties(stage06_backward_gradfd_cuda stage06_backward_gradfd_cuda_naive
                       stage06_backward_gradfd_cuda_deterministic
                       PROPERTIES LABELS "stage06;gpu" SKIP_RETURN_CODE 77)
  add_test(NAME stage07_causal_gradfd_cuda COMMAND test_grad_fd 07 cuda)
  add_test(NAME stage07_causal_gradfd_cuda_naive COMMAND test_grad_fd 07 cuda naive)
  add_test(NAME stage07_causal_gradfd_cuda_deterministic COMMAND test_grad_fd 07 cuda deterministic)
  set_tests_properties(stage07_causal_gradfd_cuda stage07_causal_gradfd_cuda_naive
                       stage07_causal_gradfd_cuda_deterministic
                       PROPERTIES LABELS "stage07;gpu" SKIP_RETURN_CODE 77)
endif()
# Stage 08 (GQA) is checked with the mask on, on the same shapes and on grouped ones (group 3, MQA).
add_test(NAME stage08_gqa_gradfd_cpu COMMAND test_grad_fd 08 cpu)
add_test(NAME stage08_gqa_gradfd_cpu_naive COMMAND test_grad_fd 08 cpu naive)
set_tests_properties(stage08_gqa_gradfd_cpu stage08_gqa_gradfd_cpu_naive
                     PROPERTIES LABELS "stage08;cpu")
if(FLASHLAB_HAVE_CUDA)
  add_test(NAME stage08_gqa_gradfd_cuda COMMAND test_grad_fd 08 cuda)
  add_test(NAME stage08_gqa_gradfd_cuda_naive COMMAND test_grad_fd 08 cuda naive)
  add_test(NAME stage08_gqa_gradfd_cuda_deterministic COMMAND test_grad_fd 08 cuda deterministic)
  set_tests_properties(stage08_gqa_gradfd_cuda stage08_gqa_gradfd_cuda_naive
                       stage08_gqa_gradfd_cuda_deterministic
                       PROPERTIES LABELS "stage08;gpu" SKIP_RETURN_CODE 77)
endif()
# Stage 10 (sliding window, sink tokens, learned sinks): every shape above with learned sinks (a
# direction on them too, so dsinks meets the differences), and window / sink-token shapes with GQA
# and Tq > Tk.
add_test(NAME stage10_swa_sinks_gradfd_cpu COMMAND test_grad_fd 10 cpu)
add_test(NAME stage10_swa_sinks_gradfd_cpu_naive COMMAND test_grad_fd 10 cpu naive)
set_tests_properties(stage10_swa_sinks_gradfd_cpu stage10_swa_sinks_gradfd_cpu_naive
                     PROPERTIES LABELS "stage10;cpu")
if(FLASHLAB_HAVE_CUDA)
  add_test(NAME stage10_swa_sinks_gradfd_cuda COMMAND test_grad_fd 10 cuda)
  add_test(NAME stage10_swa_sinks_gradfd_cuda_naive COMMAND test_grad_fd 10 cuda naive)
  add_test(NAME stage10_swa_sinks_gradfd_cuda_deterministic COMMAND test_grad_fd 10 cuda deterministic)
  set_tests_properties(stage10_swa_sinks_gradfd_cuda stage10_swa_sinks_gradfd_cuda_naive
                       stage10_swa_sinks_gradfd_cuda_deterministic
                       PROPERTIES LABELS "stage10;gpu" SKIP_RETURN_CODE 77)
endif()
# Stage 15 (bf16 window + sinks): its learned sinks' gradient against central differences of its
# own forward, on bf16-exact inputs (the header of test_grad_fd.c says why only the sinks).
add_test(NAME stage15_tc_window_sinks_gradfd_cpu COMMAND test_grad_fd 15 cpu)
set_tests_properties(stage15_tc_window_sinks_gradfd_cpu PROPERTIES LABELS "stage15;cpu")
# Stage 18 (stage 15's feature on Hopper's tiles): the same check of its learned sinks' gradient.
add_test(NAME stage18_hopper_window_sinks_gradfd_cpu COMMAND test_grad_fd 18 cpu)
set_tests_properties(stage18_hopper_window_sinks_gradfd_cpu PROPERTIES LABELS "stage18;cpu")
