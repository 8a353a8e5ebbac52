# Large golden cases, generated on demand into the build folder (golden/make_golden.py --large;
# too big to commit) and checked forward + backward. Skipped (77) without NumPy or without a GPU.
#   stage10_swa_sinks_gptoss_{cpu,cuda}: a gpt-oss-like layer (Hq = 64, Hkv = 8, d = 64, W = 128,
#   learned sinks, causal, T = 1024, B = 1) against the float64 reference.
set(large_python ${FLASHLAB_PYTHON_NUMPY})
if(NOT large_python)
  set(large_python python3)
endif()
set(large_args ${large_python} ${PROJECT_SOURCE_DIR}/golden/make_golden.py
    ${CMAKE_CURRENT_BINARY_DIR}/large_cases gptoss_t1024 10)
add_test(NAME stage10_swa_sinks_gptoss_cpu
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/large_case.sh $<TARGET_FILE:flashlab> ${large_args} cpu)
set_tests_properties(stage10_swa_sinks_gptoss_cpu PROPERTIES LABELS "stage10;cpu" SKIP_RETURN_CODE 77)
if(FLASHLAB_HAVE_CUDA)
  add_test(NAME stage10_swa_sinks_gptoss_cuda
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/large_case.sh $<TARGET_FILE:flashlab> ${large_args} cuda)
  set_tests_properties(stage10_swa_sinks_gptoss_cuda PROPERTIES LABELS "stage10;gpu" SKIP_RETURN_CODE 77
                       RESOURCE_LOCK large_cases)
  set_tests_properties(stage10_swa_sinks_gptoss_cpu PROPERTIES RESOURCE_LOCK large_cases)
endif()
