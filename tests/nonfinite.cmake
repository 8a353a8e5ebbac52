# The rule for non-finite inputs (issue 23; docs/conventions.md, "Non-finite values"): every
# registered implementation, with one NaN planted in one input at a time, gives NaN exactly where
# the float64 reference does and the reference's values everywhere else. The CPU half runs every
# CPU implementation; the CUDA half every CUDA one (skipped with 77 without a device).
add_unit_test(test_nonfinite)
add_test(NAME nonfinite_inputs_cpu COMMAND test_nonfinite cpu)
set_tests_properties(nonfinite_inputs_cpu PROPERTIES LABELS "nonfinite;cpu")
if(FLASHLAB_HAVE_CUDA)
  add_test(NAME nonfinite_inputs_cuda COMMAND test_nonfinite cuda)
  set_tests_properties(nonfinite_inputs_cuda PROPERTIES LABELS "nonfinite;gpu" SKIP_RETURN_CODE 77)
endif()
