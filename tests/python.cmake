# libflashlab from Python (python/flashlab, docs/python.md), label "python".
#  python_numpy_golden  every CPU stage through the library's public interface against the golden
#                       files; skipped (77) without numpy.
#  python_torch_cpu     flashlab.torch.attention: gradients against torch's SDPA in float64, the
#                       operator's registration, torch.compile; skipped (77) without torch.
#  python_torch_cuda    the same on CUDA tensors (float32 and bf16, stage 12 among them), the backward
#                       reusing o and lse, streams; label gpu; only in a CUDA build; skipped (77)
#                       without torch or without a GPU torch can use.
#  tools_sdpa_bench     tools/sdpa_bench.py's SDPA timing (the reference beside flashlab bench on the GPU
#                       machine) run against a stand-in torch: plain python3, in every build.
# The torch test runs under FLASHLAB_TORCH_PYTHON when it is set (a virtual environment holding
# torch, say), else under the first of python3 on PATH and /usr/bin/python3 that imports torch.
if(TARGET flashlab_shared)
  if(FLASHLAB_PYTHON_NUMPY)
    add_test(NAME python_numpy_golden
             COMMAND ${FLASHLAB_PYTHON_NUMPY} ${PROJECT_SOURCE_DIR}/tests/python/test_numpy_golden.py
                     $<TARGET_FILE:flashlab_shared> ${PROJECT_SOURCE_DIR})
  else()
    add_test(NAME python_numpy_golden COMMAND sh -c "echo 'python_numpy_golden: no python3 with numpy'; exit 77")
  endif()
  set_tests_properties(python_numpy_golden PROPERTIES LABELS "python;cpu" SKIP_RETURN_CODE 77)

  set(FLASHLAB_TORCH_PYTHON "" CACHE FILEPATH
      "python3 with numpy and torch for the test python_torch_cpu (empty: found on PATH or /usr/bin)")
  if(FLASHLAB_TORCH_PYTHON)
    set(torch_python ${FLASHLAB_TORCH_PYTHON})
  else()
    flashlab_python_with(torch_python "numpy, torch")
  endif()
  if(torch_python)
    message(STATUS "flashlab: python_torch_cpu runs under ${torch_python}")
    add_test(NAME python_torch_cpu
             COMMAND ${torch_python} ${PROJECT_SOURCE_DIR}/tests/python/test_torch.py $<TARGET_FILE:flashlab_shared>)
  else()
    message(STATUS "flashlab: no python3 with numpy and torch (set FLASHLAB_TORCH_PYTHON): python_torch_cpu skips")
    add_test(NAME python_torch_cpu COMMAND sh -c
             "echo 'python_torch_cpu: no python3 with numpy and torch (set FLASHLAB_TORCH_PYTHON)'; exit 77")
  endif()
  set_tests_properties(python_torch_cpu PROPERTIES LABELS "python;cpu" SKIP_RETURN_CODE 77 TIMEOUT 300)

  if(FLASHLAB_HAVE_CUDA)
    if(torch_python)
      add_test(NAME python_torch_cuda COMMAND ${torch_python} ${PROJECT_SOURCE_DIR}/tests/python/test_torch_cuda.py
                                             $<TARGET_FILE:flashlab_shared>)
    else()
      add_test(NAME python_torch_cuda COMMAND sh -c
               "echo 'python_torch_cuda: no python3 with numpy and torch (set FLASHLAB_TORCH_PYTHON)'; exit 77")
    endif()
    set_tests_properties(python_torch_cuda PROPERTIES LABELS "python;gpu" SKIP_RETURN_CODE 77 TIMEOUT 600)
  endif()
endif()

if(FLASHLAB_PYTHON)
  add_test(NAME tools_sdpa_bench
           COMMAND ${FLASHLAB_PYTHON} ${PROJECT_SOURCE_DIR}/tests/python/test_sdpa_bench.py ${PROJECT_SOURCE_DIR})
else()
  add_test(NAME tools_sdpa_bench COMMAND sh -c "echo 'tools_sdpa_bench: no python3'; exit 77")
endif()
set_tests_properties(tools_sdpa_bench PROPERTIES LABELS "python;cpu" SKIP_RETURN_CODE 77)
