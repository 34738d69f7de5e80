# The CUDA back-end compiles with /usr/local/cuda's nvcc for sm_90 when present; the CPU build
# never needs a GPU. The runtime is linked statically so binaries travel to the GPU machine.
set(FERRY_HAVE_CUDA OFF)
if(NOT FERRY_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    # CMake 3.25 knows no C++20 flag for nvcc 13 and would refuse the CXX_STANDARD 20 the project sets;
    # the .cu sources are C++17 (the headers they include are too).
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    enable_language(CUDA)
    # Line tables in the device code (no effect on the generated instructions): Nsight Compute's source
    # counters then name the source line of each stall (scripts/gpu-decode.sh KNCU_SOURCE=1).
    string(APPEND CMAKE_CUDA_FLAGS " -lineinfo")
    find_package(CUDAToolkit REQUIRED)
    set(FERRY_HAVE_CUDA ON)
  elseif(FERRY_CUDA STREQUAL "ON")
    message(FATAL_ERROR "FERRY_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "ferry: CUDA back-end ${FERRY_HAVE_CUDA}")
