# cmake -P script behind the "consumer" test: installs the kvsim build into a fresh prefix,
# configures and builds tests/consumer against it with the build's compiler and flags, runs
# it and compares its output with expected.txt.
#
# Inputs (-D): KVSIM_BUILD_DIR, SOURCE_DIR (tests/consumer), WORK_DIR (scratch, emptied),
# GENERATOR, CXX_COMPILER, BUILD_TYPE, CXX_FLAGS, LINKER_FLAGS.
cmake_minimum_required(VERSION 3.25)

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer test: ${what} failed (${rc}):\n${out}")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
set(build "${WORK_DIR}/build")

run_step("cmake --install" ${CMAKE_COMMAND} --install "${KVSIM_BUILD_DIR}" --prefix "${prefix}")
foreach(installed bin/kvsim include/kvsim/replay.h)
  if(NOT EXISTS "${prefix}/${installed}")
    message(FATAL_ERROR "consumer test: ${installed} is not installed under ${prefix}")
  endif()
endforeach()
# Only the public headers: a private one installed would hide a leak from the build below.
# kvsim/trace_formats.def is one: kvsim/trace.h includes it for TraceFormat's enumerators.
file(GLOB_RECURSE headers RELATIVE "${prefix}/include" "${prefix}/include/*")
foreach(h ${headers})
  if(NOT h MATCHES "^kvsim/[a-z_0-9]+\\.h$" AND NOT h STREQUAL "kvsim/trace_formats.def")
    message(FATAL_ERROR "consumer test: unexpected installed header ${h}")
  endif()
endforeach()

run_step("configuring the consumer" ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${build}" -G "${GENERATOR}"
         "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
         "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}" "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
         "-DCMAKE_EXE_LINKER_FLAGS=${LINKER_FLAGS}")
run_step("building the consumer" ${CMAKE_COMMAND} --build "${build}")

execute_process(COMMAND "${build}/kvsim_consumer" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(READ "${SOURCE_DIR}/expected.txt" expected)
if(NOT rc EQUAL 0 OR NOT out STREQUAL expected)
  message(FATAL_ERROR "consumer test: kvsim_consumer exited ${rc}\n--- got:\n${out}${err}--- expected:\n${expected}")
endif()
message(STATUS "consumer test: installed kvsim found, built and replayed as worked out by hand")
