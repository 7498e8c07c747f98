# The LibTorch-internals guard (code using LibTorch internals breaks between torch releases):
# the translation units whose build depends on LibTorch's version, built on their own so .ci/libtorch2-guard can compile them against torch 2.x in minutes
# instead of building everything twice. Neither target is part of `all`:
#   nanchaos_torch_internals_objs  OBJECT: every .cpp under harness/, detectors/, inject/ that
#                                  includes a LibTorch internal header (torch/csrc/..., ATen/...,
#                                  c10/...) or torch_compat.h (where the version differences live),
#                                  directly or through one project header that does (found here, at
#                                  configure time: a new such file joins by itself).
#   nanchaos_torch_internals       one linked GoogleTest binary: the traceless anomaly engine (an
#                                  autograd Engine and AnomalyMetadata subclass), optimizer-state
#                                  access and their tests (tests/detectors/anomaly_engine_test.cpp,
#                                  tests/harness/torch_compat_test.cpp), run by the guard.
#   torch_internals_check          both.
set(_internal_re "#include [<\"](torch/csrc/|ATen/|c10/|harness/tensor/torch_compat\\.h)")
file(GLOB_RECURSE _headers RELATIVE ${PROJECT_SOURCE_DIR} CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/harness/*.h ${PROJECT_SOURCE_DIR}/detectors/*.h ${PROJECT_SOURCE_DIR}/inject/*.h)
set(_internal_headers)
foreach(h ${_headers})
  file(STRINGS ${PROJECT_SOURCE_DIR}/${h} _hits REGEX "${_internal_re}")
  if(_hits)
    list(APPEND _internal_headers ${h})
  endif()
endforeach()
list(JOIN _internal_headers "|" _hdr_alt)
string(REPLACE "." "\\." _hdr_alt "${_hdr_alt}")
set(_user_re "${_internal_re}|#include \"(${_hdr_alt})\"")
set(NANCHAOS_TORCH_INTERNAL_SOURCES)
foreach(s ${NANCHAOS_TORCH_SOURCES})
  file(STRINGS ${s} _hits REGEX "${_user_re}")
  if(_hits)
    list(APPEND NANCHAOS_TORCH_INTERNAL_SOURCES ${s})
  endif()
endforeach()
list(LENGTH NANCHAOS_TORCH_INTERNAL_SOURCES _n)
message(STATUS "nanchaos: ${_n} translation units use LibTorch internals (target torch_internals_check)")

function(nanchaos_torch_flags target)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/generated)
  if(NANCHAOS_FMT_FIRST)
    target_include_directories(${target} BEFORE PRIVATE ${NANCHAOS_FMT_FIRST})
  endif()
  target_compile_options(${target} PRIVATE ${TORCH_CXX_FLAGS})
  target_compile_definitions(${target} PRIVATE OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
  target_link_libraries(${target} PRIVATE ${TORCH_LIBRARIES} tomlplusplus::tomlplusplus
    nlohmann_json::nlohmann_json fmt::fmt CLI11::CLI11 Threads::Threads PkgConfig::XXHASH spdlog::spdlog)
  if(NANCHAOS_WITH_MPI)
    target_link_libraries(${target} PRIVATE MPI::MPI_C)
  endif()
  if(NANCHAOS_WITH_NCCL)  # a CUDA wheel's libtorch_cuda needs its own NCCL, newer than the toolkit's
    target_link_libraries(${target} PRIVATE ${NCCL_LIBRARY})
  endif()
endfunction()

add_library(nanchaos_torch_internals_objs OBJECT EXCLUDE_FROM_ALL ${NANCHAOS_TORCH_INTERNAL_SOURCES})
nanchaos_torch_flags(nanchaos_torch_internals_objs)
target_precompile_headers(nanchaos_torch_internals_objs PRIVATE harness/tensor/torch_pch.h)
set(_targets nanchaos_torch_internals_objs)

find_package(GTest QUIET)
if(GTest_FOUND)
  add_executable(nanchaos_torch_internals EXCLUDE_FROM_ALL
    detectors/stack/anomaly_engine.cpp harness/tensor/optim_state.cpp harness/common/digest.cpp
    tests/detectors/anomaly_engine_test.cpp tests/harness/torch_compat_test.cpp)
  nanchaos_torch_flags(nanchaos_torch_internals)
  target_link_libraries(nanchaos_torch_internals PRIVATE GTest::gtest GTest::gtest_main)
  list(APPEND _targets nanchaos_torch_internals)
endif()
add_custom_target(torch_internals_check DEPENDS ${_targets})
