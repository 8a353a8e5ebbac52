# HBM-model test of stage 08 (GQA), CPU and CUDA: the forward and backward counters and workspace
# equal the closed forms of docs/hbm_model.md over packed rows (R = group Tq per kv head), for
# groups 1, 2, 3, 8, MQA and a decode step, causal on and off, outputs and gradients checked
# against a float64 reference; and the forward's K/V bytes are B Hkv Tk (d + dv) 4 when a group's
# rows fit in one query tile, 1/group of the same problem with K/V repeated to Hq heads.
add_unit_test(test_hbm_model_08)
add_test(NAME stage08_gqa_hbm_cpu COMMAND test_hbm_model_08 cpu)
set_tests_properties(stage08_gqa_hbm_cpu PROPERTIES LABELS "stage08;cpu")
if(FLASHLAB_HAVE_CUDA)
  add_test(NAME stage08_gqa_hbm_cuda COMMAND test_hbm_model_08 cuda)
  set_tests_properties(stage08_gqa_hbm_cuda PROPERTIES LABELS "stage08;gpu" SKIP_RETURN_CODE 77)
endif()
