# Stage 06 on the GPU, variant deterministic: 50 forward + backward runs are bitwise identical
# (tests/test_determinism.c). A GPU test: skipped (77) without a device.
if(FLASHLAB_HAVE_CUDA)
  add_unit_test(test_determinism)
  add_test(NAME stage06_backward_determinism_cuda COMMAND test_determinism)
  set_tests_properties(stage06_backward_determinism_cuda PROPERTIES LABELS "stage06;gpu"
                       SKIP_RETURN_CODE 77)
endif()
