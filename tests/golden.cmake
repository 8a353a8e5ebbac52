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

# Hidden cases for grading: golden/make_golden.py --seed 1 --out <build>/tests/hidden_cases/...
# (the same case list, other inputs) must be reproducible byte for byte, differ from the committed
# inputs, pass `flashlab check 07` (plain and causal cases), `check 09` (MLA) and `check 11` (paged), and --seed must
# be refused (exit 2) without --out. tests/hidden_cases.py exits 77 without NumPy.
set(golden_hidden_args ${PROJECT_SOURCE_DIR}/tests/hidden_cases.py --flashlab $<TARGET_FILE:flashlab>
    --work ${CMAKE_CURRENT_BINARY_DIR}/hidden_cases --seed 1)
if(FLASHLAB_PYTHON_NUMPY)
  add_test(NAME golden_hidden_seed COMMAND ${FLASHLAB_PYTHON_NUMPY} ${golden_hidden_args})
elseif(FLASHLAB_PYTHON)
  # A python3 without NumPy: the driver itself says so and exits 77.
  add_test(NAME golden_hidden_seed COMMAND ${FLASHLAB_PYTHON} ${golden_hidden_args})
else()
  add_test(NAME golden_hidden_seed COMMAND sh -c
           "echo 'Python not found: hidden golden cases test skipped'; exit 77")
endif()
set_tests_properties(golden_hidden_seed PROPERTIES SKIP_RETURN_CODE 77 LABELS "golden;cpu")
