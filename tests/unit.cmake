# Unit tests of the harness library in common/ (core helper). Each builds tests/test_<name>.c and
# runs without a GPU: `ctest -L unit`.
foreach(name npy case check hbm)
  add_unit_test(test_${name})
  # common/attn.c (in flashlab_core) looks stages up in the generated registry (in flashlab_stages):
  # name the stages library once more after the core so a static link resolves that reference.
  target_link_libraries(test_${name} PRIVATE flashlab_core flashlab_stages)
  add_test(NAME unit_${name} COMMAND test_${name})
  set_tests_properties(unit_${name} PROPERTIES LABELS "unit;cpu")
endforeach()
