#!/bin/bash
# Packs the C/C++ libraries tracr links (headers and shared objects, with
# their run-time closure) from this Debian machine into one folder, for a
# build on a machine that has a CUDA LibTorch but none of Debian's -dev
# packages (a GPU box reached without package access). scripts/device/
# deps.cmake turns the folder into the targets CMakeLists.txt expects.
#
#   scripts/device/pack_deps.sh DIR      (then: cmake -DTRACR_DEPS_FILE=...)
#
# The libraries come from this machine's Debian 12 (glibc 2.36): they run on
# any x86-64 glibc >= 2.36. libstdc++, libgcc and glibc itself are not packed:
# the target's own (newer or equal) are used.
set -euo pipefail
out=${1:?usage: pack_deps.sh DIR}
rm -rf "$out" && mkdir -p "$out/include" "$out/lib"
inc=/usr/include
arch=/usr/include/x86_64-linux-gnu
libdir=/usr/lib/x86_64-linux-gnu
for h in zmq.h zmq_utils.h zmq.hpp zmq_addon.hpp msgpack.hpp msgpack fmt blosc.h blosc-export.h \
         openssl libssh sqlite3.h sqlite3ext.h yaml-cpp CLI jpeglib.h jerror.h jmorecfg.h png.h pngconf.h \
         pnglibconf.h libpng16 zlib.h zconf.h; do
  [ -e "$inc/$h" ] || { echo "pack_deps: $inc/$h missing (run scripts/setup.sh)" >&2; exit 1; }
  cp -a "$inc/$h" "$out/include/"
done
mkdir -p "$out/include/x86_64-linux-gnu"
cp -a "$arch/openssl" "$arch/jconfig.h" "$out/include/x86_64-linux-gnu/"
# Link-time names, then everything they load that glibc and GCC do not provide.
libs=(zmq blosc fmt crypto ssh sqlite3 yaml-cpp jpeg png16 z)
for l in "${libs[@]}"; do
  f=$(readlink -f "$libdir/lib$l.so")
  soname=$(objdump -p "$f" | awk '/SONAME/ {print $2}')
  cp "$f" "$out/lib/$soname"
  [ "$soname" = "lib$l.so" ] || ln -sf "$soname" "$out/lib/lib$l.so"
  ldd "$f" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    case $name in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
      *) [ -e "$out/lib/$name" ] || cp "$(readlink -f "$path")" "$out/lib/$name" ;;
    esac
  done
done
du -sh "$out"
