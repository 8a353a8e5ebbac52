# Stage 12's bf16 tolerance still catches a planted bug (tests/test_tc_planted_bug.c): the CPU
# reference of the tensor-core arithmetic is compiled twice more, into this test only, with
# TC_PLANTED_BUG = 1 (the forward drops the rescale alpha) and 2 (the backward drops D), its
# registry array renamed so that both sit beside the real stage. The real reference must pass
# every golden case stage 12 runs; each bug must fail them at the bf16 tolerance (the one
# without alpha only where some row sees more than one key tile).
add_unit_test(test_tc_planted_bug)
foreach(bug 1 2)
  add_library(tc_planted_bug_${bug} OBJECT ${PROJECT_SOURCE_DIR}/stages/12_tensor_cores/reference.c)
  target_compile_definitions(tc_planted_bug_${bug} PRIVATE TC_PLANTED_BUG=${bug}
                             stage12_tensor_cores_cpu=tc_planted_bug_${bug}_cpu)
  target_link_libraries(tc_planted_bug_${bug} PRIVATE flashlab_core)
  target_link_libraries(test_tc_planted_bug PRIVATE tc_planted_bug_${bug})
endforeach()
# the harness once more after the objects (static libraries: what they need must follow them)
target_link_libraries(test_tc_planted_bug PRIVATE flashlab_stages flashlab_device flashlab_core)
add_test(NAME stage12_tensor_cores_planted_bug_cpu COMMAND test_tc_planted_bug)
set_tests_properties(stage12_tensor_cores_planted_bug_cpu PROPERTIES LABELS "stage12;cpu")
