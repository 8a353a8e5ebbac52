# libflashlab from Python (python/flashlab, docs/python.md): every CPU stage through the library's
# public interface against the golden files. Label "python"; skipped (77) without numpy.
if(TARGET flashlab_shared)
  if(FLASHLAB_PYTHON_NUMPY)
    add_test(NAME python_numpy_golden
             COMMAND ${FLASHLAB_PYTHON_NUMPY} ${PROJECT_SOURCE_DIR}/tests/python/test_numpy_golden.py
                     $<TARGET_FILE:flashlab_shared> ${PROJECT_SOURCE_DIR})
  else()
    add_test(NAME python_numpy_golden COMMAND sh -c "echo 'python_numpy_golden: no python3 with numpy'; exit 77")
  endif()
  set_tests_properties(python_numpy_golden PROPERTIES LABELS "python;cpu" SKIP_RETURN_CODE 77)
endif()
