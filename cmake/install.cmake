# install.cmake — what `cmake --install` puts under the prefix, and the tests
# that use an installed copy. Included at the end of CMakeLists.txt, after the
# targets exist.
#
#   lib/libdynapipe.so.<version> (+ .so.0, .so links)   the shared library
#   lib/libdynapipe.a                                    the static library
#   include/dynapipe/*.h     the public headers (dynapipe.h includes all the others)
#   bin/dynapipe                                         the command
#   lib/pkgconfig/dynapipe.pc, dynapipe-static.pc        pkg-config (shared, static)
#   lib/cmake/dynapipe/dynapipe{Config,ConfigVersion}.cmake
#                              find_package(dynapipe): dynapipe::dynapipe (shared)
#                              and dynapipe::dynapipe_static
#
# The package config is written by hand rather than by install(EXPORT): the
# build targets carry the source tree's include directories, which an export
# refuses, and a consumer of the shared library needs nothing but its
# headers and the file (OpenBLAS, cJSON and OpenMP are private to it). The
# static library's dependencies are recorded as the full paths found at
# configure time (OpenBLAS's OpenMP build lives outside the default search
# path, so `-lopenblas` alone could pick the pthread build).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set_target_properties(dynapipe_shared PROPERTIES VERSION ${PROJECT_VERSION}
                      SOVERSION ${PROJECT_VERSION_MAJOR})

install(TARGETS dynapipe_shared dynapipe_static
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS dynapipe RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/dynapipe
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")

# Link line of the static library's dependencies: OpenBLAS (full path of the
# OpenMP build), cJSON, PCRE2 and libsentencepiece (tokenizers; the latter is
# C++, hence libstdc++), OpenMP (-fopenmp: libgomp and its pthread), libm.
set(DYN_PC_LIBS_PRIVATE "")
foreach(lib ${DYN_BLAS_LINK_LIBRARIES} ${CJSON_LINK_LIBRARIES} ${PCRE2_LINK_LIBRARIES} ${SPM_LINK_LIBRARIES})
  string(APPEND DYN_PC_LIBS_PRIVATE " ${lib}")
endforeach()
string(APPEND DYN_PC_LIBS_PRIVATE " -lstdc++ ${OpenMP_C_FLAGS} -lm")
string(STRIP "${DYN_PC_LIBS_PRIVATE}" DYN_PC_LIBS_PRIVATE)
# Where the shared library finds OpenBLAS's OpenMP build at run time is its
# own run path (CMAKE_INSTALL_RPATH_USE_LINK_PATH in CMakeLists.txt); a
# statically linked program needs the same, so the static line carries it.
set(DYN_BLAS_RPATH "")
foreach(lib ${DYN_BLAS_LINK_LIBRARIES})
  if(IS_ABSOLUTE "${lib}")
    get_filename_component(dir "${lib}" DIRECTORY)
    set(DYN_BLAS_RPATH "-Wl,-rpath,${dir}")
  endif()
endforeach()

# The .pc files find the prefix from their own place (${pcfiledir}), so an
# install with `cmake --install --prefix P` works whatever the prefix was at
# configure time. dynapipe-static.pc names the archive itself: with both the
# .so and the .a in libdir, `-ldynapipe` would always pick the .so.
file(RELATIVE_PATH DYN_PC_TO_PREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
foreach(pc dynapipe dynapipe-static)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/${pc}.pc.in ${PROJECT_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()

set(DYN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/dynapipe)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/dynapipeConfig.cmake.in
  ${PROJECT_BINARY_DIR}/dynapipeConfig.cmake INSTALL_DESTINATION ${DYN_CMAKE_DIR}
  PATH_VARS CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dynapipeConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dynapipeConfig.cmake ${PROJECT_BINARY_DIR}/dynapipeConfigVersion.cmake
        DESTINATION ${DYN_CMAKE_DIR})

# ---- tests of the installed copy and of the public headers -----------------
# install_setup (a ctest fixture): install this build into a fresh prefix
# under the build directory. test_install builds the C guide's example
# (docs/guide-c.md) against it with pkg-config (shared and static) and with
# find_package (both targets), runs them, and compares their output with the
# installed `dynapipe plan --json` (tests/install/run.sh); the Python tests
# use the same prefix. A sanitizer build passes its flags on, so that the
# consumers link the runtime the library was built with.
set(DYN_TEST_PREFIX ${PROJECT_BINARY_DIR}/install-test)
add_test(NAME install_setup COMMAND ${PROJECT_SOURCE_DIR}/tests/install/setup.sh
         ${PROJECT_BINARY_DIR} ${DYN_TEST_PREFIX})
set_tests_properties(install_setup PROPERTIES FIXTURES_SETUP dyn_install)
set(DYN_CONSUMER_FLAGS "")
if(DYN_SANITIZE)
  set(DYN_CONSUMER_FLAGS "-fsanitize=address,undefined")
endif()
add_test(NAME test_install COMMAND ${PROJECT_SOURCE_DIR}/tests/install/run.sh
         ${DYN_TEST_PREFIX} ${PROJECT_BINARY_DIR}/install-consumers "${DYN_CONSUMER_FLAGS}")
set_tests_properties(test_install PROPERTIES FIXTURES_REQUIRED dyn_install TIMEOUT 300 ENVIRONMENT
  "DYN_SOURCE_DIR=${PROJECT_SOURCE_DIR};CC=${CMAKE_C_COMPILER};OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")

# test_headers: every public header alone compiles as C11 and as C++
# (extern "C", no C-only constructs), warnings as errors, and the umbrella
# dynapipe.h includes every other one.
add_test(NAME test_headers COMMAND ${PROJECT_SOURCE_DIR}/tests/install/headers.sh
         ${PROJECT_SOURCE_DIR}/include)
set_tests_properties(test_headers PROPERTIES ENVIRONMENT "CC=${CMAKE_C_COMPILER}")

# The version macros of include/dynapipe/version.h must be the project's.
file(STRINGS ${PROJECT_SOURCE_DIR}/include/dynapipe/version.h DYN_VERSION_LINE
     REGEX "^#define DYN_VERSION_STRING ")
if(NOT DYN_VERSION_LINE STREQUAL "#define DYN_VERSION_STRING \"${PROJECT_VERSION}\"")
  message(FATAL_ERROR "include/dynapipe/version.h says '${DYN_VERSION_LINE}', the project is ${PROJECT_VERSION}")
endif()
