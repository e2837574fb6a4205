# Helpers that keep the per-directory CMake files to a list of sources.

# Every TU includes LibTorch's heavy headers; one precompiled header, reused by every target, keeps the build
# on a 2-core machine in minutes. All targets share the same flags, which REUSE_FROM requires.
add_library(tune_pch STATIC ${CMAKE_SOURCE_DIR}/cmake/pch.cpp)
target_link_libraries(tune_pch PUBLIC ${TORCH_LIBRARIES} fmt::fmt nlohmann_json::nlohmann_json)
target_compile_options(tune_pch PUBLIC ${TORCH_CXX_FLAGS})
target_precompile_headers(tune_pch PRIVATE <torch/torch.h> <fmt/format.h> <nlohmann/json.hpp>)

# tune_add_library(NAME SOURCES a.cpp b.cpp DEPENDS other_libs...)
function(tune_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPENDS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${ARG_DEPENDS} ${TORCH_LIBRARIES} fmt::fmt nlohmann_json::nlohmann_json)
  target_compile_options(${name} PUBLIC ${TORCH_CXX_FLAGS})
  target_precompile_headers(${name} REUSE_FROM tune_pch)
endfunction()

# tune_add_test(NAME SOURCES test_a.cpp ... DEPENDS libs... [PROPERTIES prop value ...]): one Catch2 executable,
# each TEST_CASE a CTest test; PROPERTIES are added to every such test (e.g. FIXTURES_REQUIRED).
function(tune_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPENDS;PROPERTIES" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE tune_catch_main ${ARG_DEPENDS})
  # The test's own code is not optimised (tests/CMakeLists.txt: tune_test_pch); the libraries it tests are.
  target_compile_options(${name} PRIVATE ${TUNE_TEST_OPTIMIZATION})
  target_precompile_headers(${name} REUSE_FROM tune_test_pch)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  target_compile_definitions(${name} PRIVATE TUNE_SOURCE_DIR="${CMAKE_SOURCE_DIR}" TUNE_BINARY_DIR="${CMAKE_BINARY_DIR}"
                                             TUNE_PYTHON="${TUNE_PYTHON}")
  catch_discover_tests(${name} TEST_PREFIX "${name}: " PROPERTIES TIMEOUT 600 ${ARG_PROPERTIES})
endfunction()
