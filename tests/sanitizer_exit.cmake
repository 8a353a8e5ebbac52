# Sanitized builds only (FLASHLAB_SANITIZE): a sanitizer report must end a process with
# FLASHLAB_SANITIZER_EXIT_CODE (86, set by tests/sanitizer_options.c), never with flashlab's own
# 1 (check failed), 2 (bad input) or 3 (unsupported). sanitizer_probe does one signed overflow
# (UBSan) or one leak (LeakSanitizer); `ctest -L sanitize`.
if(NOT FLASHLAB_SANITIZE)
  return()
endif()
add_executable(sanitizer_probe sanitizer_probe.c)
set(probes "")
if(FLASHLAB_SANITIZE MATCHES "undefined")
  list(APPEND probes "overflow|runtime error: signed integer overflow")
endif()
if(FLASHLAB_SANITIZE MATCHES "address|leak")
  list(APPEND probes "leak|LeakSanitizer: detected memory leaks")
endif()
foreach(probe ${probes})
  string(REPLACE "|" ";" parts "${probe}")
  list(GET parts 0 kind)
  list(GET parts 1 report)
  # cli_expect.sh: the exact exit status, and a report in the output (so a probe that exits 86
  # for another reason does not pass)
  add_test(NAME sanitizer_exit_${kind}
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli_expect.sh ${FLASHLAB_SANITIZER_EXIT_CODE} "${report}"
                   $<TARGET_FILE:sanitizer_probe> ${kind})
  set_tests_properties(sanitizer_exit_${kind} PROPERTIES LABELS "sanitize;cpu")
endforeach()
