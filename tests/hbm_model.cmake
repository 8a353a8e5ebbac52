# HBM-model tests of the CPU stages 01-03: the counters equal the closed forms of
# docs/hbm_model.md (one test per stage, labelled with the stage so `ctest -R stage03` runs it).
add_unit_test(test_hbm_model)
foreach(stage 01_naive 02_chunked 03_tiled)
  string(SUBSTRING ${stage} 0 2 number)
  add_test(NAME stage${stage}_hbm_cpu COMMAND test_hbm_model ${number})
  set_tests_properties(stage${stage}_hbm_cpu PROPERTIES LABELS "stage${number};cpu")
endforeach()
