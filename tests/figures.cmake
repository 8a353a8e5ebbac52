# The figures of docs/figures/: tools/make_figures.py draws them from `flashlab bench --json`. The
# test runs it with the built flashlab into a scratch folder of the build tree (never docs/figures)
# twice, checks that hbm_per_stage.svg appears and that the two runs wrote the same bytes (the
# counters are exact, the SVG is made deterministic). Figure 2 needs a GPU run's output and is not
# drawn here. Needs Python with NumPy and matplotlib; without them the test says what is missing and
# exits 77 (CTest: skipped, never passed).
set(figures_script ${PROJECT_SOURCE_DIR}/tools/make_figures.py)
set(figures_dir ${CMAKE_CURRENT_BINARY_DIR}/figures_test)

# Of the Pythons with NumPy, the first that also has matplotlib.
flashlab_python_with(figures_python "numpy, matplotlib")

if(figures_python)
  # matplotlib is checked again when the test runs: it may have gone since configure
  add_test(NAME figures_script COMMAND sh -c
           "set -e
            if ! '${figures_python}' -c 'import numpy, matplotlib' 2>/dev/null; then
              echo 'matplotlib (or NumPy) not found for ${figures_python}: figures_script skipped'; exit 77
            fi
            rm -rf '${figures_dir}'
            '${figures_python}' '${figures_script}' --flashlab '$<TARGET_FILE:flashlab>' --out '${figures_dir}/a'
            '${figures_python}' '${figures_script}' --flashlab '$<TARGET_FILE:flashlab>' --out '${figures_dir}/b'
            for f in hbm_per_stage.svg; do
              test -s '${figures_dir}/a/'$f || { echo \"missing: ${figures_dir}/a/$f\"; exit 1; }
              grep -q '</svg>' '${figures_dir}/a/'$f || { echo \"not a whole SVG: ${figures_dir}/a/$f\"; exit 1; }
              cmp '${figures_dir}/a/'$f '${figures_dir}/b/'$f || { echo \"$f differs between two runs\"; exit 1; }
            done
            if ls '${figures_dir}/a/gpu_tflops.svg' >/dev/null 2>&1; then
              echo 'gpu_tflops.svg written without --gpu'; exit 1
            fi
            echo \"figures ok: $(ls '${figures_dir}/a')\"")
elseif(FLASHLAB_PYTHON_NUMPY)
  add_test(NAME figures_script COMMAND sh -c
           "echo 'matplotlib not found (tried ${FLASHLAB_PYTHON_NUMPY} and /usr/bin/python3): figures_script skipped'; exit 77")
else()
  add_test(NAME figures_script COMMAND sh -c
           "echo 'Python with NumPy not found: figures_script skipped'; exit 77")
endif()
# The timeout catches a hang, nothing finer: the two runs take about 25 s in a Release build and
# about 190 s in the sanitizer build on 2 cores with nothing beside them (2026-11-28), and one run of
# CI's sanitize half went past 300 s with another test on the second core
set_tests_properties(figures_script PROPERTIES SKIP_RETURN_CODE 77 LABELS "notebooks;cpu" TIMEOUT 900)
