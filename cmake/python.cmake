# python.cmake — the Python package's tests as one ctest test, test_python
# (python/tests/run.py: fails when a module does not load, has no tests,
# nothing runs, or anything is skipped). They use this build's library and
# command, and the prefix the install_setup fixture (cmake/install.cmake)
# installed into. The interpreter is the first python3 on PATH at configure
# time, as scripts/test.sh finds it.
find_program(DYN_PYTHON3 python3 REQUIRED)
set(DYN_PY_ENV
  "DYNAPIPE_LIB=$<TARGET_FILE:dynapipe_shared>" "DYNAPIPE_CLI=$<TARGET_FILE:dynapipe>"
  "DYNAPIPE_TEST_PREFIX=${DYN_TEST_PREFIX}" "DYNAPIPE_TEST_REQUIRE_ALL=1"
  "OMP_NUM_THREADS=2" "OMP_WAIT_POLICY=PASSIVE" "PYTHONDONTWRITEBYTECODE=1" ${DYN_TEST_CACHE_ENV})
if(DYN_SANITIZE)
  # The interpreter is not instrumented: the sanitizer runtime the library
  # needs must be loaded first, and Python's own allocations at exit are
  # not leaks of ours.
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so
                  OUTPUT_VARIABLE DYN_LIBASAN OUTPUT_STRIP_TRAILING_WHITESPACE)
  list(APPEND DYN_PY_ENV "LD_PRELOAD=${DYN_LIBASAN}" "ASAN_OPTIONS=detect_leaks=0")
endif()
add_test(NAME test_python COMMAND ${DYN_PYTHON3} ${PROJECT_SOURCE_DIR}/python/tests/run.py)
set_tests_properties(test_python PROPERTIES FIXTURES_REQUIRED dyn_install TIMEOUT 600
                     ENVIRONMENT "${DYN_PY_ENV}")
