# The golden files: golden/cases must be exactly what golden/make_golden.py writes, and the
# generator's gradients must agree with finite differences. Both need Python with NumPy; without
# NumPy they exit 77 and CTest reports them as skipped (never as passed).
set(golden_check ${PROJECT_SOURCE_DIR}/tests/check_golden.py)
set(golden_generator ${PROJECT_SOURCE_DIR}/golden/make_golden.py)

if(FLASHLAB_PYTHON_NUMPY)
  add_test(NAME golden_regenerate COMMAND ${FLASHLAB_PYTHON_NUMPY} ${golden_check})
  add_test(NAME golden_selftest COMMAND ${FLASHLAB_PYTHON_NUMPY} ${golden_generator} --selftest)
elseif(FLASHLAB_PYTHON)
  # A python3 without NumPy: the check script itself says so and exits 77.
  add_test(NAME golden_regenerate COMMAND ${FLASHLAB_PYTHON} ${golden_check})
  add_test(NAME golden_selftest COMMAND sh -c
           "echo 'NumPy not found: golden generator selftest skipped'; exit 77")
else()
  add_test(NAME golden_regenerate COMMAND sh -c
           "echo 'Python not found: golden regeneration check skipped'; exit 77")
  add_test(NAME golden_selftest COMMAND sh -c
           "echo 'Python not found: golden generator selftest skipped'; exit 77")
endif()
set_tests_properties(golden_regenerate golden_selftest PROPERTIES
                     SKIP_RETURN_CODE 77 LABELS "golden;cpu")
