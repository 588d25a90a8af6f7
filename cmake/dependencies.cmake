# Every dependency comes from Debian's packages; scripts/install-deps.sh installs them. Each
# check below fails at configure time with the Debian package to install, rather than halfway
# through the build with a missing header.
include(CheckIncludeFileCXX)
set(MOLT_INSTALL_HINT "or run scripts/install-deps.sh")

# molt_require_header(HEADER PACKAGE [INCLUDE_DIRS...]): HEADER must compile-include.
function(molt_require_header header package)
  string(MAKE_C_IDENTIFIER "MOLT_HAVE_${header}" var)
  set(CMAKE_REQUIRED_INCLUDES ${ARGN})
  set(CMAKE_REQUIRED_QUIET ON)
  set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)  # compile only: some headers need their library
  # A miss is cached too: look again, so that installing the package is enough.
  if(NOT ${var})
    unset(${var} CACHE)
  endif()
  check_include_file_cxx("${header}" ${var})
  if(NOT ${var})
    message(FATAL_ERROR "${header} not found: apt-get install ${package}, ${MOLT_INSTALL_HINT}")
  endif()
endfunction()

# molt_require_pkg(PREFIX MODULE PACKAGE): a pkg-config module, imported as PkgConfig::PREFIX.
macro(molt_require_pkg prefix module package)
  pkg_check_modules(${prefix} QUIET IMPORTED_TARGET ${module})
  if(NOT ${prefix}_FOUND)
    message(FATAL_ERROR "pkg-config module ${module} not found: apt-get install ${package}, "
                        "${MOLT_INSTALL_HINT}")
  endif()
endmacro()

# molt_require_package(NAME PACKAGE [find_package args...]): a CMake package config.
macro(molt_require_package name package)
  find_package(${name} ${ARGN} QUIET)
  if(NOT ${name}_FOUND)
    message(FATAL_ERROR "CMake package ${name} not found: apt-get install ${package}, "
                        "${MOLT_INSTALL_HINT}")
  endif()
endmacro()

find_package(PkgConfig QUIET)
if(NOT PKG_CONFIG_FOUND)
  message(FATAL_ERROR "pkg-config not found: apt-get install pkg-config, ${MOLT_INSTALL_HINT}")
endif()
molt_require_pkg(BLAS openblas libopenblas-openmp-dev)
molt_require_pkg(HWY libhwy libhwy-dev)
molt_require_pkg(PCRE2 libpcre2-8 libpcre2-dev)
molt_require_pkg(UTF8PROC libutf8proc libutf8proc-dev)
# Debian's build of cpp-httplib is a compiled library; its pkg-config Cflags carry the feature
# macros (OpenSSL, zlib, brotli) the header's classes were compiled with, so they must be used.
molt_require_pkg(HTTPLIB cpp-httplib libcpp-httplib-dev)
molt_require_package(OpenMP "libgcc-12-dev (build-essential)")
find_package(Threads REQUIRED)
molt_require_package(nlohmann_json nlohmann-json3-dev 3.10)
molt_require_package(CLI11 libcli11-dev)
molt_require_package(fmt libfmt-dev)
molt_require_package(OpenSSL libssl-dev COMPONENTS Crypto)
molt_require_package(LAPACK liblapack-dev)
# oneDNN for bf16 prefill GEMM. Its CMake package wants OpenCL's headers (Debian builds it with
# a GPU runtime we do not use), so the library and header are found directly.
if(MOLT_DNNL)
  find_library(DNNL_LIBRARY dnnl)
  if(NOT DNNL_LIBRARY)
    message(FATAL_ERROR "libdnnl not found: apt-get install libdnnl-dev, ${MOLT_INSTALL_HINT}")
  endif()
  set(MOLT_DNNL_LINK "-ldnnl ")
else()
  set(DNNL_LIBRARY "")
  set(MOLT_DNNL_LINK "")
endif()

# Headers, each where the build includes it from.
molt_require_header(cblas.h libopenblas-openmp-dev ${BLAS_INCLUDE_DIRS})
molt_require_header(lapack.h liblapacke-dev)
molt_require_header(hwy/highway.h libhwy-dev ${HWY_INCLUDE_DIRS})
set(CMAKE_REQUIRED_DEFINITIONS -DPCRE2_CODE_UNIT_WIDTH=8)  # pcre2.h refuses to compile without
molt_require_header(pcre2.h libpcre2-dev ${PCRE2_INCLUDE_DIRS})
unset(CMAKE_REQUIRED_DEFINITIONS)
molt_require_header(utf8proc.h libutf8proc-dev ${UTF8PROC_INCLUDE_DIRS})
molt_require_header(nlohmann/json.hpp nlohmann-json3-dev)
molt_require_header(CLI/CLI.hpp libcli11-dev)
molt_require_header(fmt/core.h libfmt-dev)
molt_require_header(openssl/evp.h libssl-dev)
molt_require_header(httplib.h libcpp-httplib-dev)
if(MOLT_DNNL)
  molt_require_header(oneapi/dnnl/dnnl.hpp libdnnl-dev)
endif()
if(MOLT_BUILD_TESTS)
  # The install test links libmolt.a statically: OpenBLAS and LAPACK need their Fortran runtime.
  # It lives in GCC's own library folder, so ask the compiler rather than find_library.
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libgfortran.so
                  OUTPUT_VARIABLE MOLT_GFORTRAN_LIBRARY OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT IS_ABSOLUTE "${MOLT_GFORTRAN_LIBRARY}" OR NOT EXISTS "${MOLT_GFORTRAN_LIBRARY}")
    message(FATAL_ERROR "libgfortran.so not found (a static link of libmolt.a needs it): "
                        "apt-get install gfortran, ${MOLT_INSTALL_HINT}")
  endif()
  molt_require_package(GTest "libgtest-dev libgmock-dev")
  molt_require_header(gtest/gtest.h libgtest-dev)
  molt_require_header(gmock/gmock.h libgmock-dev)
endif()
if(MOLT_BUILD_BENCH)
  molt_require_package(benchmark libbenchmark-dev)
  molt_require_header(benchmark/benchmark.h libbenchmark-dev)
endif()
