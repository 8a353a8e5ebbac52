# HBM-model test of stage 08 (GQA), CPU and CUDA: the forward and backward counters and workspace
# equal the closed forms of docs/hbm_model.md over packed rows (R = group Tq per kv head), for
# groups 1, 2, 3, 8, MQA and a decode step, causal on and off, outputs and gradients checked
# against a float64 reference; and the forward's K/V bytes are B Hkv Tk (d + dv) 4 when a group's
# rows fit in one query tile, 1/group of the same problem with K/V repeated to Hq heads.
add_hbm_model_test(08 gqa)
