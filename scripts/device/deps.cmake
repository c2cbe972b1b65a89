# The targets CMakeLists.txt otherwise gets from Debian's packages, made from
# a folder written by scripts/device/pack_deps.sh, for a machine without
# them (a GPU box with a CUDA LibTorch and no package access):
#
#   cmake -S . -B build-cuda -DTRACR_DEPS_FILE=scripts/device/deps.cmake \
#         -DTRACR_DEPS_DIR=/path/to/packed -DTorch_DIR=<libtorch>/share/cmake/Torch \
#         -DTRACR_BUILD_TESTS=OFF
#
# Run the binaries with LD_LIBRARY_PATH=<packed>/lib.
if(NOT TRACR_DEPS_DIR OR NOT EXISTS "${TRACR_DEPS_DIR}/include/zmq.h")
  message(FATAL_ERROR "TRACR_DEPS_DIR must name a folder written by scripts/device/pack_deps.sh (got '${TRACR_DEPS_DIR}')")
endif()
set(_d "${TRACR_DEPS_DIR}")
set(_inc "${_d}/include" "${_d}/include/x86_64-linux-gnu")
function(tracr_dep target lib)
  add_library(${target} INTERFACE IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_inc}")
  if(lib)
    set_property(TARGET ${target} PROPERTY INTERFACE_LINK_LIBRARIES "${_d}/lib/lib${lib}.so")
  endif()
endfunction()
tracr_dep(PkgConfig::ZMQ zmq)
tracr_dep(PkgConfig::BLOSC blosc)
tracr_dep(cppzmq "")
set_property(TARGET cppzmq PROPERTY INTERFACE_LINK_LIBRARIES PkgConfig::ZMQ)
tracr_dep(msgpackc-cxx "")
tracr_dep(OpenSSL::Crypto crypto)
tracr_dep(fmt::fmt fmt)
tracr_dep(ssh ssh)
tracr_dep(SQLite::SQLite3 sqlite3)
tracr_dep(yaml-cpp yaml-cpp)
# experiments/ asks FindJPEG, FindPNG and FindZLIB: point them at the folder.
set(JPEG_INCLUDE_DIR "${_d}/include" CACHE PATH "")
set(JPEG_LIBRARY "${_d}/lib/libjpeg.so" CACHE FILEPATH "")
set(PNG_PNG_INCLUDE_DIR "${_d}/include" CACHE PATH "")
set(PNG_LIBRARY "${_d}/lib/libpng16.so" CACHE FILEPATH "")
set(ZLIB_INCLUDE_DIR "${_d}/include" CACHE PATH "")
set(ZLIB_LIBRARY "${_d}/lib/libz.so" CACHE FILEPATH "")
# Their run-time closure sits beside them.
set(CMAKE_BUILD_RPATH "${_d}/lib")
