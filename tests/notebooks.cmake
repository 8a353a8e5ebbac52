# The notebooks (notebooks/*.ipynb): each is executed headless by tests/run_notebook.py with
# nbclient (kernel python3) against the built flashlab; a cell error fails the test. They need
# Python with NumPy, matplotlib, nbformat, nbclient and ipykernel; without them the test says what
# is missing and exits 77 (CTest: skipped, never passed).
set(notebook_runner ${PROJECT_SOURCE_DIR}/tests/run_notebook.py)
file(GLOB notebooks CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/notebooks/*.ipynb)
list(SORT notebooks)

# Of the Pythons with NumPy, prefer one that also has the notebook modules (else the test itself
# says which module is missing and skips).
flashlab_python_with(notebook_python "numpy, matplotlib, nbformat, nbclient, ipykernel")
if(NOT notebook_python)
  set(notebook_python ${FLASHLAB_PYTHON_NUMPY})
endif()

foreach(nb ${notebooks})
  get_filename_component(name ${nb} NAME_WE)
  if(notebook_python)
    add_test(NAME notebook_${name}
             COMMAND ${notebook_python} ${notebook_runner} ${nb}
                     --flashlab $<TARGET_FILE:flashlab> --root ${PROJECT_SOURCE_DIR})
  else()
    add_test(NAME notebook_${name} COMMAND sh -c
             "echo 'Python with NumPy not found: notebook ${name} skipped'; exit 77")
  endif()
  set_tests_properties(notebook_${name} PROPERTIES SKIP_RETURN_CODE 77 LABELS "notebooks;cpu"
                       TIMEOUT 900)
endforeach()
