# Checks the CTest files that gtest_discover_tests writes into the build tree (`<target>[N]_tests.cmake`):
# every one must parse and give each test the properties the project asked for. CMake >= 4 writes
# the values of PROPERTIES into bracket arguments of a lower level than CMake 3.x did, so a value
# with a `]` in it (the old skip regex `\[  SKIPPED \]`) closed its bracket early and the whole file
# failed to parse ("Argument not separated from preceding token by whitespace"): ctest then found
# no tests at all. This script fails on such a value whatever CMake version runs it.
#
#   cmake -DTESTS_DIR=<build>/tests -DSKIP_REGEX=<regex> -DPROPERTY_VALUES="a|b|..." -P <this file>
cmake_minimum_required(VERSION 3.25)

foreach(var TESTS_DIR SKIP_REGEX)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_discovered_tests: -D${var}=... is required")
  endif()
endforeach()

# 1. The skip regex matches GoogleTest's skip line and nothing a passing test prints.
if(NOT "[  SKIPPED ] CudaOps.Linear (0 ms)" MATCHES "${SKIP_REGEX}")
  message(FATAL_ERROR "skip regex '${SKIP_REGEX}' does not match GoogleTest's '[  SKIPPED ]' line")
endif()
foreach(line "[       OK ] CudaOps.Linear (3 ms)" "[  PASSED  ] 1 test." "[  FAILED  ] CudaOps.Linear")
  if(line MATCHES "${SKIP_REGEX}")
    message(FATAL_ERROR "skip regex '${SKIP_REGEX}' also matches '${line}'")
  endif()
endforeach()

# 2. Every property value survives bracket quoting at any level: written as [[v]], [=[v]=] and
# [==[v]==] and read back, it is itself.
set(scratch "${TESTS_DIR}/check_discovered_tests.d")
file(MAKE_DIRECTORY "${scratch}")
string(REPLACE "|" ";" PROPERTY_VALUES "${PROPERTY_VALUES}")
foreach(value IN LISTS SKIP_REGEX PROPERTY_VALUES)
  foreach(level "" "=" "==")
    file(WRITE "${scratch}/value.cmake" "set(read_back [${level}[${value}]${level}])\n")
    set(read_back "")
    # A parse error here ends the script with CMake's own message and a non-zero status.
    include("${scratch}/value.cmake")
    if(NOT read_back STREQUAL value)
      message(FATAL_ERROR "property value '${value}' does not survive the bracket argument "
                          "[${level}[...]${level}]: it reads back as '${read_back}'")
    endif()
  endforeach()
endforeach()

# 3. The generated files parse, and each test carries the skip regex.
file(GLOB generated "${TESTS_DIR}/*_tests.cmake")
if(NOT generated)
  message(FATAL_ERROR "no *_tests.cmake in ${TESTS_DIR}: build the test targets first")
endif()
set(tests 0)
set(missing "")
function(add_test name)
  math(EXPR n "${tests} + 1")
  set(tests ${n} PARENT_SCOPE)
endfunction()
function(set_tests_properties name)
  set(found FALSE)
  set(next_is_skip FALSE)
  foreach(arg IN LISTS ARGN)
    if(next_is_skip AND arg STREQUAL SKIP_REGEX)
      set(found TRUE)
    endif()
    set(next_is_skip FALSE)
    if(arg STREQUAL "SKIP_REGULAR_EXPRESSION")
      set(next_is_skip TRUE)
    endif()
  endforeach()
  if(NOT found AND NOT "DISABLED" IN_LIST ARGN)
    list(APPEND missing "${name}")
    set(missing "${missing}" PARENT_SCOPE)
  endif()
endfunction()
foreach(f IN LISTS generated)
  include("${f}")
endforeach()
if(tests EQUAL 0)
  message(FATAL_ERROR "the generated files in ${TESTS_DIR} add no tests")
endif()
if(missing)
  list(LENGTH missing n)
  list(GET missing 0 first)
  message(FATAL_ERROR "${n} discovered tests lack SKIP_REGULAR_EXPRESSION '${SKIP_REGEX}' (first: ${first})")
endif()
list(LENGTH generated files)
message(STATUS "check_discovered_tests: ${files} files, ${tests} tests, all parse and carry the skip regex")
