# One CTest test per GoogleTest *suite* of a test binary, in place of gtest_discover_tests' one
# per case. Why: every CTest test is a new process, and nanchaos_tests links LibTorch, whose
# static initialisers cost ~0.5 s per start (measured: `nanchaos_tests --gtest_filter=None` takes
# 0.49 s on the 2-core CI host). One test per case paid that 680 times (~340 s of CPU per ctest
# run, most cases themselves take milliseconds); one per suite pays it ~150 times.
#
# Two halves:
# - included from a CMakeLists.txt: nanchaos_add_gtest_suites(TARGET EXCLUDE pattern...
#   TIMEOUT s) lists the binary's cases after each build (POST_BUILD) and makes ctest read the
#   resulting test list (the directory's TEST_INCLUDE_FILES), as gtest_discover_tests does;
# - run as a script (cmake -P, by that POST_BUILD step): writes the list.
# Test names are "<Suite>.*" (the gtest filter they run), so `ctest -R '^Controller\.'` selects a
# suite and `ctest -R '^[A-Z]'` every unit suite. EXCLUDE takes gtest patterns ("Suite.*" or
# "Suite.Case"): those cases run elsewhere (their own CTest tests) and are left out of their
# suite's filter. LOCK suite... names the suites that launch real jobs against wall-clock
# deadlines (a 3-s start-up deadline, a hang's timeout): they take RESOURCE_LOCK
# wall_clock_deadlines, which the scenario-suite tests hold too, so none of them runs beside
# another (tests/CMakeLists.txt). A binary that cannot list its cases makes one failing test that
# says why.

if(CMAKE_SCRIPT_MODE_FILE)
  # Script mode: -D TEST_EXECUTABLE=... -D CTEST_FILE=... -D EXCLUDE="a:b" (gtest's separator)
  #              -D TIMEOUT=... -D WORKING_DIRECTORY=... -D LOCK="Suite:Suite"
  string(REPLACE ":" ";" EXCLUDE "${EXCLUDE}")
  string(REPLACE ":" ";" LOCK "${LOCK}")
  execute_process(COMMAND "${TEST_EXECUTABLE}" --gtest_list_tests
    WORKING_DIRECTORY "${WORKING_DIRECTORY}" OUTPUT_VARIABLE listing ERROR_VARIABLE err
    RESULT_VARIABLE rc TIMEOUT 60)
  if(NOT rc EQUAL 0)
    string(REPLACE "\n" " " err "${err}")
    file(WRITE "${CTEST_FILE}"
      "add_test([=[nanchaos_tests_cannot_list_cases]=] sh -c [=[echo 'nanchaos_tests --gtest_list_tests failed (exit ${rc}): ${err}' >&2; exit 1]=])\n")
    return()
  endif()
  string(REPLACE ";" "\\;" listing "${listing}")
  string(REPLACE "\n" ";" lines "${listing}")
  set(suites "")
  set(suite "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^([^ #][^ ]*)\\.( +#.*)?$")
      set(suite "${CMAKE_MATCH_1}")
      list(APPEND suites "${suite}")
      set(cases_${suite} "")
    elseif(line MATCHES "^  ([^ #]+)" AND suite)
      list(APPEND "cases_${suite}" "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  set(out "")
  foreach(suite IN LISTS suites)
    set(kept 0)
    set(dropped "")
    foreach(case IN LISTS "cases_${suite}")
      set(excluded FALSE)
      foreach(pattern IN LISTS EXCLUDE)
        if(pattern STREQUAL "${suite}.*" OR pattern STREQUAL "${suite}.${case}")
          set(excluded TRUE)
        endif()
      endforeach()
      if(excluded)
        list(APPEND dropped "${suite}.${case}")
      else()
        math(EXPR kept "${kept} + 1")
      endif()
    endforeach()
    if(kept EQUAL 0)
      continue()
    endif()
    set(filter "${suite}.*")
    if(dropped)
      list(JOIN dropped ":" dropped)
      string(APPEND filter ":-${dropped}")
    endif()
    set(lock "")
    list(FIND LOCK "${suite}" locked)  # not IN_LIST: a -P script runs under CMake 2.x policies
    if(NOT locked EQUAL -1)
      set(lock " RESOURCE_LOCK wall_clock_deadlines")
    endif()
    string(APPEND out
      "add_test([=[${suite}.*]=] [=[${TEST_EXECUTABLE}]=] [=[--gtest_filter=${filter}]=])\n"
      "set_tests_properties([=[${suite}.*]=] PROPERTIES TIMEOUT ${TIMEOUT} "
      "WORKING_DIRECTORY [=[${WORKING_DIRECTORY}]=] LABELS unit${lock})\n")
  endforeach()
  file(WRITE "${CTEST_FILE}" "${out}")
  return()
endif()

function(nanchaos_add_gtest_suites target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "TIMEOUT" "EXCLUDE;LOCK")
  set(list_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake")
  set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites_include.cmake")
  list(JOIN arg_EXCLUDE ":" exclude)
  list(JOIN arg_LOCK ":" lock)
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND "${CMAKE_COMMAND}" "-DTEST_EXECUTABLE=$<TARGET_FILE:${target}>"
      "-DCTEST_FILE=${list_file}" "-DEXCLUDE=${exclude}" "-DTIMEOUT=${arg_TIMEOUT}" "-DLOCK=${lock}"
      "-DWORKING_DIRECTORY=${CMAKE_CURRENT_BINARY_DIR}" -P "${CMAKE_CURRENT_FUNCTION_LIST_FILE}"
    BYPRODUCTS "${list_file}" VERBATIM)
  file(WRITE "${include_file}"
    "if(EXISTS [=[${list_file}]=])\n"
    "  include([=[${list_file}]=])\n"
    "else()\n"
    "  add_test([=[${target}_NOT_BUILT]=] [=[${target}_NOT_BUILT]=])\n"
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include_file}")
endfunction()
