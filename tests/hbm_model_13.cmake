# HBM-model test of stage 13 (ring attention): per rank, HBM bytes and link bytes sent and received,
# forward and backward, equal the closed forms of docs/hbm_model.md, and outputs and gradients match
# the float64 reference. CPU ranks for P = 1..4; GPU ranks (where the CUDA side is built, i.e. NCCL
# was found) for P = 1 on one GPU, and P = 2, 3, 4 as far as the machine has GPUs (77 with < 2).
add_unit_test(test_hbm_model_13)
add_test(NAME stage13_ring_hbm_cpu COMMAND test_hbm_model_13 cpu)
set_tests_properties(stage13_ring_hbm_cpu PROPERTIES LABELS "stage13;cpu")
get_property(no_cuda_13 GLOBAL PROPERTY FLASHLAB_NO_CUDA_13)
if(FLASHLAB_HAVE_CUDA AND NOT no_cuda_13)
  add_test(NAME stage13_ring_hbm_cuda COMMAND test_hbm_model_13 cuda 1)
  add_test(NAME stage13_ring_hbm_cuda_ranks2 COMMAND test_hbm_model_13 cuda 2 3 4)
  set_tests_properties(stage13_ring_hbm_cuda stage13_ring_hbm_cuda_ranks2 PROPERTIES LABELS "stage13;gpu"
                       SKIP_RETURN_CODE 77)
endif()
