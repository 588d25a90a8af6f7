# The C API as a library for apps: libmolt.so (exports the molt_* functions of
# include/molt/molt.h only) and libmolt.a (every part's objects in one archive), installed with
# the header, a pkg-config file (molt.pc) and a CMake package (find_package(molt) → molt::molt,
# the shared library; molt::molt_static, the archive with its dependencies).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

file(GLOB MOLT_CAPI_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/capi/*.cc)
target_compile_definitions(molt_capi PRIVATE MOLT_VERSION="${PROJECT_VERSION}")

# The shared library compiles the C API itself and links the parts in; the version script keeps
# every C++ symbol (ours, fmt's, nlohmann's) inside, so nothing but molt_* is visible to apps.
add_library(molt_shared SHARED ${MOLT_CAPI_SOURCES})
target_include_directories(molt_shared PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_definitions(molt_shared PRIVATE MOLT_VERSION="${PROJECT_VERSION}")
target_link_libraries(molt_shared PRIVATE molt_runtime)
target_link_options(molt_shared PRIVATE -Wl,--version-script=${PROJECT_SOURCE_DIR}/cmake/molt.map
                    -Wl,--no-undefined)
set_target_properties(molt_shared PROPERTIES
  OUTPUT_NAME molt LINK_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/molt.map
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
  EXPORT_NAME molt LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
target_include_directories(molt_shared INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
molt_warnings(molt_shared)

# The static archive: the objects of every part (bottom to top), the C API included.
get_property(MOLT_PARTS GLOBAL PROPERTY MOLT_PART_TARGETS)
set(MOLT_PART_OBJECTS)
foreach(part IN LISTS MOLT_PARTS)
  list(APPEND MOLT_PART_OBJECTS $<TARGET_OBJECTS:${part}>)
endforeach()
add_library(molt_static STATIC ${MOLT_PART_OBJECTS})
set_target_properties(molt_static PROPERTIES OUTPUT_NAME molt EXPORT_NAME molt_static
                      ARCHIVE_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR} LINKER_LANGUAGE CXX)
target_include_directories(molt_static INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

# What a static link needs besides libmolt.a (pkg-config modules; see molt.pc.in).
set(MOLT_PC_REQUIRES_PRIVATE "openblas libhwy libpcre2-8 libutf8proc libcrypto fmt lapack")

install(FILES ${PROJECT_SOURCE_DIR}/include/molt/molt.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/molt)
install(TARGETS molt_shared molt_static EXPORT molt-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT molt-targets NAMESPACE molt:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/molt)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/molt-config.cmake.in
                              ${PROJECT_BINARY_DIR}/molt-config.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/molt)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/molt-config-version.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/molt-config.cmake ${PROJECT_BINARY_DIR}/molt-config-version.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/molt)

# molt.pc finds its prefix from its own place (${pcfiledir}), so one file serves any
# `cmake --install --prefix`.
file(RELATIVE_PATH MOLT_PC_TO_PREFIX "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" MOLT_PC_TO_PREFIX "${MOLT_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/molt.pc.in ${PROJECT_BINARY_DIR}/molt.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/molt.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
