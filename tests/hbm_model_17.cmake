# HBM-model test of stage 17 (MLA in bf16, CPU reference): counters and workspace equal the closed
# form of docs/hbm_model.md ("Stage 17") on four shapes with 1, 2 and 5 splits. CPU only: the stage
# has no CUDA side yet.
add_unit_test(test_hbm_model_17)
add_test(NAME stage17_tc_mla_hbm_cpu COMMAND test_hbm_model_17 cpu)
set_tests_properties(stage17_tc_mla_hbm_cpu PROPERTIES LABELS "stage17;cpu")
