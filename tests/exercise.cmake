# The acceptance tests of `flashlab exercise` (docs/teaching.md): for every stage folder and each of
# its devices, stageNN_name_exercise_<cpu|cuda> writes the student copy, builds it as variant student in a
# scratch build tree under this build folder, requires the copy to fail its check (exit 1) and the
# unmodified stage, copied in, to pass (exit 0). Labels "exercise;stageNN", so `ctest -R stage07`
# and `ctest -L exercise` run them. The CUDA ones are labelled gpu and skip (77) without a device,
# before building anything. One scratch tree per device, shared by that device's tests (a resource
# lock runs them one at a time); the CUDA tree compiles for one architecture only.
#
# Not registered in a sanitizer build: there they would build and run unsanitized scratch trees,
# which the sanitize workflow is not about. The generator itself runs under the sanitizers there
# in cli_exercise_* below.
set(exercise_script sh ${CMAKE_CURRENT_SOURCE_DIR}/exercise_stage.sh)
set(exercise_scratch ${CMAKE_CURRENT_BINARY_DIR}/exercise_scratch)

# The one architecture of the CUDA scratch tree: the last (newest) one this build compiles for.
set(exercise_cuda_arch "")
if(FLASHLAB_HAVE_CUDA)
  list(GET CMAKE_CUDA_ARCHITECTURES -1 exercise_cuda_arch)
endif()

# What this build found goes to the scratch trees too (compilers, BLAS, cJSON, search paths), so
# that they configure wherever this one did (e.g. with the dependencies unpacked off the system).
set(exercise_found "")
foreach(var CMAKE_C_COMPILER CMAKE_CUDA_COMPILER CMAKE_PREFIX_PATH BLAS_LIBRARIES CBLAS_INCLUDE_DIR
            CJSON_INCLUDE_DIR CJSON_LIBRARIES CMAKE_DISABLE_FIND_PACKAGE_cJSON NCCL_INCLUDE_DIR NCCL_LIBRARY)
  if(DEFINED ${var} AND NOT "${${var}}" STREQUAL "")
    string(REPLACE ";" "$<SEMICOLON>" value "${${var}}")
    list(APPEND exercise_found "-D${var}=${value}")
  endif()
endforeach()

# Stages without an exercise, and stages whose CUDA side has none (none of either at present; a
# stage listed here is passed over).
set(exercise_none)
set(exercise_no_cuda)

if(NOT FLASHLAB_SANITIZE)
  file(GLOB exercise_stage_dirs LIST_DIRECTORIES true ${PROJECT_SOURCE_DIR}/stages/[0-9][0-9]_*)
  list(SORT exercise_stage_dirs)
  foreach(dir ${exercise_stage_dirs})
    get_filename_component(folder ${dir} NAME)
    string(SUBSTRING ${folder} 0 2 number)
    if(number IN_LIST exercise_none)
      continue()
    endif()
    file(GLOB c_files ${dir}/*.c)
    file(GLOB cu_files ${dir}/*.cu)
    if(c_files)
      add_test(NAME stage${folder}_exercise_cpu
               COMMAND ${exercise_script} $<TARGET_FILE:flashlab> ${PROJECT_SOURCE_DIR}
                       ${exercise_scratch}/cpu ${number} cpu
                       -DCMAKE_BUILD_TYPE=Release -DFLASHLAB_CUDA=OFF ${exercise_found})
      set_tests_properties(stage${folder}_exercise_cpu PROPERTIES LABELS "exercise;stage${number};cpu"
                           RESOURCE_LOCK exercise_scratch_cpu)
    endif()
    get_property(no_cuda GLOBAL PROPERTY FLASHLAB_NO_CUDA_${number})
    if(cu_files AND FLASHLAB_HAVE_CUDA AND NOT no_cuda AND NOT number IN_LIST exercise_no_cuda)
      add_test(NAME stage${folder}_exercise_cuda
               COMMAND ${exercise_script} $<TARGET_FILE:flashlab> ${PROJECT_SOURCE_DIR}
                       ${exercise_scratch}/cuda ${number} cuda
                       -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=${exercise_cuda_arch}
                       ${exercise_found})
      set_tests_properties(stage${folder}_exercise_cuda PROPERTIES LABELS "exercise;stage${number};gpu"
                           RESOURCE_LOCK exercise_scratch_cuda SKIP_RETURN_CODE 77)
    endif()
  endforeach()
endif()

# The generator on every stage and its refusals (no build; also in the sanitizer build).
add_test(NAME cli_exercise
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli_exercise.sh $<TARGET_FILE:flashlab> ${PROJECT_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/cli_work/exercise)
set_tests_properties(cli_exercise PROPERTIES LABELS "cli;cpu;exercise")
