# Every flashlab command shown in the documentation (README.md, docs/, the stage lessons,
# golden/README.md, notebooks/README.md) runs and exits as the page says (tests/doc_commands.py).
# Commands with --device cuda exit 77 without a GPU, and the page says so. Labels "docs;cpu".
if(FLASHLAB_PYTHON)
  add_test(NAME docs_commands
           COMMAND ${FLASHLAB_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/doc_commands.py
                   --flashlab $<TARGET_FILE:flashlab> --root ${PROJECT_SOURCE_DIR})
else()
  add_test(NAME docs_commands COMMAND sh -c "echo 'Python not found: documentation commands skipped'; exit 77")
endif()
set_tests_properties(docs_commands PROPERTIES LABELS "docs;cpu" SKIP_RETURN_CODE 77 TIMEOUT 1800)
