# Warning and sanitizer flags shared by every target of the project.
function(molt_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra $<$<BOOL:${MOLT_WERROR}>:-Werror>)
  # GCC 12 at -O3 reports false positives from inlined libstdc++ code (GCC bugs 105329,
  # 105651, 107852): std::vector / std::string copies flagged as out of bounds.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE -Wno-array-bounds -Wno-restrict -Wno-stringop-overflow
                                             -Wno-stringop-overread)
  endif()
  if(MOLT_NATIVE)
    target_compile_options(${target} PRIVATE -march=native)
  endif()
  if(MOLT_SANITIZE OR MOLT_FUZZ)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer
                                             -fno-sanitize-recover=undefined)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
  if(MOLT_TSAN)  # the threaded parts (scheduler, server) under ThreadSanitizer
    target_compile_options(${target} PRIVATE -fsanitize=thread -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=thread)
  endif()
  # libFuzzer's coverage on every part; only the harnesses link libFuzzer itself
  # (tests/fuzz/CMakeLists.txt adds -fsanitize=fuzzer to them).
  if(MOLT_FUZZ)
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link)
  endif()
endfunction()

# molt_part(name [NOT_IN_PACKAGE] DEPS ...): one static library per folder src/<name>/, public
# headers under include/molt/<name>/. Sources are globbed so a part grows by adding files.
# NOT_IN_PACKAGE keeps the part out of libmolt.a (the server: apps don't embed it).
add_library(molt_all INTERFACE)
function(molt_part name)
  cmake_parse_arguments(P "NOT_IN_PACKAGE" "" "DEPS" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${name}/*.cc)
  if(NOT srcs)  # a part not written yet
    add_library(molt_${name} INTERFACE)
    target_include_directories(molt_${name} INTERFACE ${PROJECT_SOURCE_DIR}/include)
    target_link_libraries(molt_${name} INTERFACE ${P_DEPS})
    target_link_libraries(molt_all INTERFACE molt_${name})
    return()
  endif()
  add_library(molt_${name} STATIC ${srcs})
  target_include_directories(molt_${name} PUBLIC ${PROJECT_SOURCE_DIR}/include
                                          PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(molt_${name} PUBLIC ${P_DEPS} Threads::Threads)
  molt_warnings(molt_${name})
  if(MOLT_SANITIZE OR MOLT_FUZZ)
    target_link_options(molt_${name} INTERFACE -fsanitize=address,undefined)
  endif()
  if(MOLT_TSAN)
    target_link_options(molt_${name} INTERFACE -fsanitize=thread)
  endif()
  target_link_libraries(molt_all INTERFACE molt_${name})
  if(NOT P_NOT_IN_PACKAGE)
    set_property(GLOBAL APPEND PROPERTY MOLT_PART_TARGETS molt_${name})  # for libmolt.a
  endif()
endfunction()

# molt_tests(name): tests/<name>/*_test.cc → one GoogleTest binary, registered with ctest.
function(molt_tests name)
  file(GLOB srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/${name}/*.cc)
  if(NOT srcs)
    return()
  endif()
  add_executable(molt_${name}_tests ${srcs} ${PROJECT_SOURCE_DIR}/tests/gemm_f32_by_default.cc)
  # The lower parts' tests (which may use each other: model's golden tests tokenize) link the lower
  # parts only, up to transfer, so they build without the parts above: CI cross-builds just those
  # for its arm64 subset (make arm64-ci-test).
  if(name IN_LIST MOLT_LOWER_PARTS)
    set(under_test molt_transfer)
  else()
    set(under_test molt_all)
  endif()
  target_link_libraries(molt_${name}_tests PRIVATE ${under_test} GTest::gtest GTest::gtest_main GTest::gmock)
  target_include_directories(molt_${name}_tests PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(molt_${name}_tests PRIVATE
      MOLT_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
      MOLT_SHARED_DIR="${PROJECT_SOURCE_DIR}/../shared"
      MOLT_BINARY="$<TARGET_FILE:molt>")
  molt_warnings(molt_${name}_tests)
  gtest_discover_tests(molt_${name}_tests DISCOVERY_TIMEOUT 60
                       PROPERTIES LABELS ${name})
endfunction()
