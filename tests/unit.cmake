# Unit tests of the harness library in common/ (core helper). Each builds tests/test_<name>.c and
# runs without a GPU: `ctest -L unit`.
foreach(name npy case check hbm)
  add_unit_test(test_${name})
  add_test(NAME unit_${name} COMMAND test_${name})
  set_tests_properties(unit_${name} PROPERTIES LABELS "unit;cpu")
endforeach()
