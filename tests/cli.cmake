# Tests of the flashlab command-line tool: exit codes, messages, and `flashlab run` on a
# user-made case folder. Labels "cli;cpu". The scripts run under /bin/sh.
add_unit_test(test_cli_compare) # helper: compares a written .npy with a golden one

set(cli_golden ${PROJECT_SOURCE_DIR}/golden/cases)
set(cli_work ${CMAKE_CURRENT_BINARY_DIR}/cli_work)
set(cli_expect sh ${CMAKE_CURRENT_SOURCE_DIR}/cli_expect.sh)

# cli_test(NAME RC REGEX ARGS...): `flashlab ARGS...` must exit RC with output matching REGEX.
function(cli_test name rc regex)
  add_test(NAME cli_${name} COMMAND ${cli_expect} ${rc} "${regex}" $<TARGET_FILE:flashlab> ${ARGN})
  set_tests_properties(cli_${name} PROPERTIES LABELS "cli;cpu")
endfunction()

cli_test(no_command 2 "Usage")
cli_test(unknown_command 2 "unknown command 'frobnicate'" frobnicate)
cli_test(unknown_option 2 "unknown option '--frob'" check 01 --frob)
cli_test(missing_stage 2 "missing STAGE" check)
cli_test(bad_stage 2 "no stage '99'" check 99)
cli_test(non_numeric 2 "--threads needs an integer" check 01 --threads two)
cli_test(missing_value 2 "needs a value" check 01 --sram)
cli_test(bad_device 2 "unknown device 'tpu'" check 01 --device tpu)
cli_test(run_needs_out 2 "--out DIR" run 01 ${cli_golden}/plain_t1)
cli_test(help 0 "flashlab check STAGE" --help)
cli_test(check_help 0 "Exit: 0 all passed" check --help)
cli_test(missing_case_dir 2 "no_such_case" check 01 ${cli_work}/no_such_case)
# Stage 01 has no causal masking: the message must name stage 07, which adds it.
cli_test(unsupported_causal 3 "does not support causal.*stage 07" check 01 ${cli_golden}/causal_t37_d80)
cli_test(bwd_on_forward_stage 3 "stage 06 adds it" check 01 --direction bwd)
cli_test(diff 0 "\\+\\+\\+ stages/02_chunked/chunked.c" diff 01 02)
cli_test(diff_new_file 0 "\\+\\+\\+ stages/07_causal/mask.h" diff 06 07)
cli_test(diff_step 0 "fa2_tuned.cuh: a step of its own" diff 05)
cli_test(diff_declared_partner 0 "--- stages/05_fa2/fa2_tuned.cuh" diff 06)
cli_test(diff_bad_stage 2 "no folder" diff 01 98)
cli_test(bench_json 0 "\"time_ms\": [0-9]" bench --stages 01 --T 16 --H 1 --reps 1 --json)
cli_test(tour_cpu 0 "rows, 0 failed" tour --device cpu)

# A golden folder with no case in it: checking nothing is an error, not a pass.
add_test(NAME cli_no_case_checked
         COMMAND ${cli_expect} 2 "no case was checked" $<TARGET_FILE:flashlab> check 01)
set_tests_properties(cli_no_case_checked PROPERTIES LABELS "cli;cpu"
                     ENVIRONMENT "FLASHLAB_GOLDEN=${CMAKE_CURRENT_SOURCE_DIR}")

# Without CUDA compiled in there is never a device, so the skip path is deterministic here.
# (With CUDA the same command runs the GPU checks; the stage tests labelled gpu cover that.)
if(NOT FLASHLAB_HAVE_CUDA)
  cli_test(cuda_without_device 77 "no CUDA device: skipped" check 01 --device cuda)
endif()

# A malformed case: exit 2 naming the file, and `run` writes nothing.
add_test(NAME cli_malformed_case
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli_bad_case.sh $<TARGET_FILE:flashlab>
                 ${cli_golden}/plain_t1 ${cli_work}/malformed)
set_tests_properties(cli_malformed_case PROPERTIES LABELS "cli;cpu")

# `flashlab run` on user-made folders (only q/k/v copied from golden cases), compared with golden o/lse.
foreach(case plain_t1 plain_t37_d80_bwd plain_tq_lt_tk)
  add_test(NAME cli_run_${case}
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli_run_case.sh $<TARGET_FILE:flashlab>
                   $<TARGET_FILE:test_cli_compare> 03 ${cli_golden}/${case} ${cli_work}/run_${case})
  set_tests_properties(cli_run_${case} PROPERTIES LABELS "cli;cpu")
endforeach()

# `flashlab run` with do.npy on a stage with a backward pass writes the gradients too.
foreach(case plain_t37_d80_bwd plain_scale)
  add_test(NAME cli_run_bwd_${case}
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli_run_bwd_case.sh $<TARGET_FILE:flashlab>
                   $<TARGET_FILE:test_cli_compare> 06 ${cli_golden}/${case} ${cli_work}/run_bwd_${case})
  set_tests_properties(cli_run_bwd_${case} PROPERTIES LABELS "cli;cpu")
endforeach()

# Stage 09 (MLA) cases are their own kind: `run` writes y.npy (compared with the golden one), and
# a case of the other kind is refused with exit 3 and a message naming the stage that runs it.
foreach(variant - naive)
  add_test(NAME cli_run_mla_${variant}
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli_run_mla.sh $<TARGET_FILE:flashlab>
                   $<TARGET_FILE:test_cli_compare> ${variant} ${cli_golden}/mla_decode_tq4
                   ${cli_work}/run_mla_${variant})
  set_tests_properties(cli_run_mla_${variant} PROPERTIES LABELS "cli;cpu;stage09")
endforeach()
cli_test(mla_case_on_attention_stage 3 "runs attention cases; stage 09 runs mla cases" check 05 ${cli_golden}/mla_wide)
cli_test(attention_case_on_mla_stage 3 "stage 09 \\(mla\\) runs mla cases; stage 01 runs attention cases" check 09 ${cli_golden}/tour)
cli_test(mla_no_backward 3 "no backward pass" check 09 --direction bwd)
cli_test(bench_mla_json 0 "\"mla\": \\{\"D\": 32" bench --stages 09 --B 1 --H 2 --Tq 1 --T 16 --d 8 --latent 16
         --rope-dim 4 --model-dim 32 --q-rank 8 --reps 1 --json)
cli_test(bench_odd_rope 2 "--rope-dim must be even" bench --stages 09 --rope-dim 3)

# Stage 11's paged decode cases: bad ones are refused with exit 2 naming the file and the entry;
# `run 11` on a user-made paged folder writes o.npy and lse.npy equal to the golden ones; a stage
# without the paged feature refuses a named paged case with exit 3 naming stage 11.
add_test(NAME cli_bad_paged
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli_bad_paged.sh $<TARGET_FILE:flashlab>
                 ${cli_golden}/paged_ragged_tq1 ${cli_work}/bad_paged)
set_tests_properties(cli_bad_paged PROPERTIES LABELS "cli;cpu;stage11")
foreach(case paged_gptoss paged_page1)
  add_test(NAME cli_run_${case}
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli_run_case.sh $<TARGET_FILE:flashlab>
                   $<TARGET_FILE:test_cli_compare> 11 ${cli_golden}/${case} ${cli_work}/run_${case})
  set_tests_properties(cli_run_${case} PROPERTIES LABELS "cli;cpu;stage11")
endforeach()
cli_test(paged_case_on_stage_08 3 "paged; stage 11 adds it" check 08 ${cli_golden}/paged_gqa_tq3)

# `flashlab check --json`, the grade report: valid JSON, "pass" / "fail" per case, the reference's
# HBM bytes beside the variant's, and the exit status of the text mode.
if(FLASHLAB_PYTHON)
  add_test(NAME cli_grade_json
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli_grade_json.sh $<TARGET_FILE:flashlab> ${FLASHLAB_PYTHON}
                   ${cli_golden} ${cli_work}/grade_json)
  set_tests_properties(cli_grade_json PROPERTIES LABELS "cli;cpu")
endif()

# Stage 12 computes in bf16 and runs only head dims d = dv in {64, 128}: `list` shows it; a named
# case with other head dims exits 3 naming the dims; bench reports such a row without failing
# (unless every row is refused: exit 3);
# the grade report names the precision and its tolerances.
cli_test(list_precision 0 "tensor_cores +cpu +- +bf16 d=64,128" list)
cli_test(head_dims_unsupported 3 "stage 12 \\(tensor_cores, cpu\\) runs head dims d = dv in \\{64, 128\\}; this case has d = 80, dv = 80"
         check 12 ${cli_golden}/causal_t37_d80)
cli_test(bench_head_dims 0 "runs head dims d = dv in \\{64, 128\\}; this case has d = 32" bench --stages 12 --T 16
         --d 32,64 --H 1 --reps 1)
# ... and when every row is refused, nothing was measured: exit 3 with one line saying so
cli_test(bench_all_refused 3 "no row ran: the selected stages lack what every row asks for" bench --stages 12
         --T 16 --d 32 --H 1 --reps 1)
# --queued holds the GPU while a run is launched: a CPU run has nothing to queue behind
cli_test(bench_queued_needs_cuda 2 "--queued times CUDA runs: it needs --device cuda" bench --stages 01 --T 16
         --H 1 --reps 1 --queued)
# ... and on a GPU it times through every timing path: an attention forward + backward, a decode
# step of two kernels (stage 16's split kernel and its combine, where this build has it), an MLA
# step (stage 09, runner_time_step). Exit 0 means every row ran (bench exits 1 on a failed run, 3
# when every row was refused).
if(FLASHLAB_HAVE_CUDA)
  get_property(no_cuda_16 GLOBAL PROPERTY FLASHLAB_NO_CUDA_16)
  foreach(args "06 --direction bwd --T 256 --H 2 --d 64"
               "16 --Tq 1 --H 8 --Hkv 2 --T 4096 --d 128 --page-size 16"
               "09 --B 2 --H 16 --Tq 1 --T 256 --d 128")
    separate_arguments(args)
    list(GET args 0 stage)
    if(stage STREQUAL "16" AND no_cuda_16)
      continue()
    endif()
    cli_test(bench_queued_cuda_${stage} 0 "\"time_ms\": [0-9]" bench --device cuda --queued --reps 3 --json
             --stages ${args})
    set_tests_properties(cli_bench_queued_cuda_${stage} PROPERTIES LABELS "cli;gpu" SKIP_RETURN_CODE 77)
  endforeach()
  # stage 13's ring launches on streams of its own, which the hold does not hold: its row is
  # refused with the reason (exit 3: every row refused), never timed wrong
  get_property(no_cuda_13 GLOBAL PROPERTY FLASHLAB_NO_CUDA_13)
  if(NOT no_cuda_13)
    cli_test(bench_queued_cuda_13 3 "runs its kernels on streams of its own" bench --device cuda --queued --reps 3
             --stages 13 --T 256 --H 2 --d 64)
    set_tests_properties(cli_bench_queued_cuda_13 PROPERTIES LABELS "cli;gpu" SKIP_RETURN_CODE 77)
  endif()
endif()
cli_test(grade_json_bf16 0 "\"precision\": \"bf16\", \"tolerance\": \\{\"forward\": 0.03125, \"gradients\": 0.0625\\}"
         check 12 ${cli_golden}/tc_t37_d128_causal --json)
