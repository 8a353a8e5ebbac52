# unit_api: libflashlab's public interface, version 2 (include/flashlab.h), linked as any caller
# links it (the shared library), on the CPU: backward_from against forward + backward, bf16 inputs,
# the version-1 struct, and the refusals (device pointers to a CPU stage, bad memory and dtype
# values, missing arrays). No libflashlab in a sanitizer build, so no test there.
if(TARGET flashlab_shared)
  add_executable(test_api test_api.c)
  target_include_directories(test_api PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/common)
  target_link_libraries(test_api PRIVATE flashlab_shared ${MATH_LIBRARY})
  add_test(NAME unit_api COMMAND test_api)
  set_tests_properties(unit_api PROPERTIES LABELS "unit;cpu")
endif()
