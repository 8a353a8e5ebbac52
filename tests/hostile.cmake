# Hostile input (issue: fuzzing findings): test_hostile builds each hostile case folder at test time
# and runs the flashlab tool on it; one CTest test per finding, `ctest -L hostile`.
add_unit_test(test_hostile)
target_link_libraries(test_hostile PRIVATE flashlab_core flashlab_stages)
foreach(item paged_seq_len huge_window huge_scale magnitudes out_into_case dangling_link fifo_input huge_output
             header_control_bytes shape_literals nan_input)
  add_test(NAME hostile_${item}
           COMMAND test_hostile $<TARGET_FILE:flashlab> ${PROJECT_SOURCE_DIR}/golden/cases ${item})
  set_tests_properties(hostile_${item} PROPERTIES LABELS "hostile;cpu" TIMEOUT 300)
endforeach()
