#!/usr/bin/env bash
# Copies the shared libraries that the given binaries load into OUT_DIR,
# leaving out what the runtime image already provides and must provide
# itself: glibc and the compiler runtime (the image's are newer and other
# programs there depend on them) and CUDA and driver libraries (from the
# nvidia/cuda base and the NVIDIA container toolkit, matched to the host
# driver), and Open MPI's libraries with the ones they bring (libmpi,
# libopen-rte, libopen-pal, hwloc, libevent, libudev): the runtime stage
# installs its own distribution's Open MPI package, and mpirun, libmpi and
# the MCA plugins that libmpi dlopens must come from one build (a bundled
# Debian libmpi or hwloc would shadow them through LD_LIBRARY_PATH).
# libmpi.so.40 is Open MPI 4's stable ABI, so the server built against
# Debian's 4.1.4 runs with Ubuntu 24.04's 4.1.6 in the CUDA image. What
# remains is Debian's gRPC, protobuf, Abseil, prometheus-cpp, ICU, PCRE2
# and their own dependencies, which a runtime image of another distribution
# does not have in these versions.
#
# Usage: deploy/bundle_libs.sh OUT_DIR BINARY...
set -euo pipefail

if (($# < 2)); then
  echo "usage: $0 OUT_DIR BINARY..." >&2
  exit 2
fi
out=$1
shift
mkdir -p "$out"

# Sonames provided by the runtime base (glibc, libstdc++, libgcc_s), by
# the CUDA runtime image and driver, or by the base's Open MPI package.
excluded() {
  case $1 in
    linux-vdso.so.* | ld-linux*.so.* | libc.so.* | libm.so.* | libdl.so.* | \
      libpthread.so.* | librt.so.* | libresolv.so.* | libutil.so.* | \
      libstdc++.so.* | libgcc_s.so.* | \
      libcuda.so.* | libcudart.so.* | libcublas*.so.* | libnccl.so.* | \
      libnvidia-*.so.* | libnvrtc*.so.* | libcurand.so.* | libcufft*.so.* | \
      libcusparse.so.* | libcusolver*.so.* | \
      libmpi.so.* | libopen-rte.so.* | libopen-pal.so.* | libhwloc.so.* | \
      libevent_core-*.so.* | libevent_pthreads-*.so.* | libudev.so.*)
      return 0
      ;;
  esac
  return 1
}

missing=0
for binary in "$@"; do
  # ldd lines: "libfoo.so.1 => /path/libfoo.so.1 (0x...)" or
  # "libfoo.so.1 => not found".
  while read -r name arrow path _; do
    [[ $arrow == "=>" ]] || continue
    if excluded "$name"; then continue; fi
    if [[ $path == not ]]; then
      # Excluded libraries were skipped above; a missing one here would be
      # missing in the image too.
      echo "bundle_libs: $binary needs $name, which is not installed" >&2
      missing=1
      continue
    fi
    # -L: copy the file the soname link points at, under the soname.
    cp -L "$path" "$out/$name"
  done < <(ldd "$binary")
done
if ((missing)); then exit 1; fi
echo "bundle_libs: $(find "$out" -maxdepth 1 -type f | wc -l) libraries in $out" >&2
