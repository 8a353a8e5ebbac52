# HBM-model tests of the CUDA stages 01 (cuBLAS naive) and 04 (FlashForward kernel): the device
# counters equal the closed forms of docs/hbm_model.md. GPU tests: skipped (77) without a device.
if(FLASHLAB_HAVE_CUDA)
  add_unit_test(test_hbm_model_cuda)
  foreach(stage 01_naive 04_flash_forward)
    string(SUBSTRING ${stage} 0 2 number)
    add_test(NAME stage${stage}_hbm_cuda COMMAND test_hbm_model_cuda ${number})
    set_tests_properties(stage${stage}_hbm_cuda PROPERTIES LABELS "stage${number};gpu"
                         SKIP_RETURN_CODE 77)
  endforeach()
endif()
