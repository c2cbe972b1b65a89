# The floors' include rules (ARCHITECTURE.md), checked from the sources:
#   cmake -DROOT=<source dir> -P cmake/check_layers.cmake
# Fails listing every include that points the wrong way:
#   - only store/ includes sqlite3.h (tests aside);
#   - each floor includes only the floors below it (`allowed` below); in
#     particular fleet/ never includes store/, and store/ reaches the agents
#     only through wire/ (the control lines, roles and records), never agent/;
#   - wire/ (the contract below agent/ and the controller) includes protocol/ only.
cmake_minimum_required(VERSION 3.22)
if(NOT ROOT)
  message(FATAL_ERROR "check_layers: pass -DROOT=<source dir>")
endif()

# Project folders a floor may include, besides itself and the system.
set(allowed_wire     "protocol")
set(allowed_core     "protocol")
set(allowed_store    "protocol;wire;settings;core")
set(allowed_fleet    "protocol;wire;settings;agent;core")
set(allowed_analysis "protocol;wire;settings;agent;experiments;core;store")
set(allowed_controller "protocol;wire;settings;agent;experiments;meters;core;store;fleet;analysis")
set(project_folders "protocol;wire;settings;meters;experiments;agent;core;store;fleet;analysis;controller")
set(floors "wire;core;store;fleet;analysis;controller")

set(violations "")
set(code_folders "protocol;wire;settings;meters;experiments;agent;core;store;fleet;analysis;controller;bench;fuzz")
foreach(folder IN LISTS code_folders)
  file(GLOB_RECURSE sources "${ROOT}/${folder}/*.cpp" "${ROOT}/${folder}/*.hpp" "${ROOT}/${folder}/*.h"
       "${ROOT}/${folder}/*.def")
  foreach(src IN LISTS sources)
    file(RELATIVE_PATH rel "${ROOT}" "${src}")
    file(STRINGS "${src}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]*)[>\"].*" "\\1" inc "${line}")
      if(inc STREQUAL "sqlite3.h" AND NOT folder STREQUAL "store")
        list(APPEND violations "${rel}: includes sqlite3.h (only store/ may, through store/statement.hpp)")
      endif()
      if(NOT folder IN_LIST floors)
        continue()
      endif()
      string(REGEX MATCH "^[a-z_]+/" top "${inc}")
      string(REGEX REPLACE "/$" "" top "${top}")
      if(top STREQUAL "" OR top STREQUAL folder OR NOT top IN_LIST project_folders)
        continue()
      endif()
      if(NOT top IN_LIST allowed_${folder})
        list(JOIN allowed_${folder} ", " may)
        list(APPEND violations "${rel}: includes ${inc} (${folder}/ may include only: ${may})")
      endif()
    endforeach()
  endforeach()
endforeach()

if(violations)
  list(JOIN violations "\n  " text)
  message(FATAL_ERROR "includes that point the wrong way:\n  ${text}")
endif()
message(STATUS "check_layers: every include points down")
