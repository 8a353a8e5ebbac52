# The Hopper plumbing (common/hopper.cuh, for stage 14) on its own: TMA loads completed on an
# mbarrier, then wgmma, checked against a CPU product (tests/test_hopper_plumbing.cu). It needs
# sm_90a, so it is built when the CUDA architectures include 90 (or are the machine's own), and
# skipped with 77 on a device that is not compute capability 9.0.
if(FLASHLAB_HAVE_CUDA)
  if(CMAKE_CUDA_ARCHITECTURES MATCHES "(^|;)90|native")
    add_executable(test_hopper_plumbing test_hopper_plumbing.cu)
    set_target_properties(test_hopper_plumbing PROPERTIES CUDA_ARCHITECTURES 90a)
    target_link_libraries(test_hopper_plumbing PRIVATE flashlab_core)
    add_test(NAME hopper_plumbing_cuda COMMAND test_hopper_plumbing)
    set_tests_properties(hopper_plumbing_cuda PROPERTIES LABELS "gpu;hopper" SKIP_RETURN_CODE 77)
  else()
    message(STATUS "flashlab: the Hopper plumbing test is left out (CUDA architectures ${CMAKE_CUDA_ARCHITECTURES} have no 90)")
  endif()
endif()
