# HBM-model test of stage 13 (ring attention, CPU ranks): per rank, HBM bytes and link bytes sent
# and received, forward and backward, equal the closed forms of docs/hbm_model.md for P = 1..4, and
# outputs and gradients match the float64 reference. CPU only: the stage has no CUDA side yet.
add_unit_test(test_hbm_model_13)
add_test(NAME stage13_ring_hbm_cpu COMMAND test_hbm_model_13 cpu)
set_tests_properties(stage13_ring_hbm_cpu PROPERTIES LABELS "stage13;cpu")
