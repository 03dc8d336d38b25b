#!/usr/bin/env bash
# Installs what tandem needs to build (Debian packages; the CUDA toolkit must be present),
# then configures and builds into build/. Idempotent; fast when nothing changed.
# Extra CMake arguments: TANDEM_CMAKE_ARGS="-DTANDEM_WERROR=ON" scripts/setup.sh
# Extra Debian packages (the test command's clang for the fuzzer): TANDEM_EXTRA_PACKAGES="clang"
# --quiet: instead of CMake's output, a line when the build starts and one per tenth of it, on
# stderr (the full output goes to build/setup.log, shown on failure): the demo's first run
# builds for minutes, and it should say so.
# --packages: only the Debian packages (the test command then builds while the venvs install).
set -euo pipefail
cd "$(dirname "$0")/.."
quiet=0 packages_only=0
case "${1:-}" in
  --quiet) quiet=1 ;;
  --packages) packages_only=1 ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--quiet|--packages]" >&2; exit 2 ;;
esac

packages="build-essential cmake catch2 libfmt-dev nlohmann-json3-dev libunwind-dev libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler python3 python3-pip python3-matplotlib valgrind passwd dpkg-dev systemd python3-seccomp prometheus ${TANDEM_EXTRA_PACKAGES:-}"
missing=""
for p in $packages; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq $missing >/dev/null
  else
    echo "setup: missing Debian packages:$missing" >&2
    echo "setup: install them with: sudo apt-get install -y$missing" >&2
    exit 1
  fi
fi
[ "$packages_only" = 0 ] || exit 0

cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$cuda_home/include/cuda.h" ]; then
  echo "setup: the CUDA toolkit was not found at $cuda_home (set CUDA_HOME); tandem needs its headers and nvcc" >&2
  exit 1
fi
export PATH="$cuda_home/bin:$PATH"

if [ "$quiet" = 0 ]; then
  # shellcheck disable=SC2086
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUDA_HOME="$cuda_home" ${TANDEM_CMAKE_ARGS:-} >/dev/null
  cmake --build build -j"$(nproc)"
else
  mkdir -p build
  log=build/setup.log
  if [ ! -f build/CMakeCache.txt ]; then
    echo "setup: building tandem into build/ ($(nproc) cores; a first build takes several minutes)" >&2
  fi
  # shellcheck disable=SC2086
  if ! { cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUDA_HOME="$cuda_home" ${TANDEM_CMAKE_ARGS:-} &&
         cmake --build build -j"$(nproc)"; } 2>&1 | tee "$log" |
       awk '/Building|Linking/ { working = 1 }
            working && match($0, /^\[ *[0-9]+%\]/) {
              p = substr($0, RSTART + 1, RLENGTH - 3) + 0
              if (p >= shown + 10) { shown = p - p % 10; printf "setup: built %d%%\n", shown > "/dev/stderr"; fflush("/dev/stderr") }
            }'; then
    tail -40 "$log" >&2
    echo "setup: the build failed (whole output: $log)" >&2
    exit 1
  fi
fi

# The Kubernetes API schema validator for the manifests' test (tests/deploy), pinned, into the
# build directory (not the system Python). Without the registry the test is skipped, saying so.
k8s_requirements=tests/deploy/requirements-kubernetes.txt
k8s_target=build/python-kubernetes
if ! cmp -s "$k8s_requirements" "$k8s_target/.requirements" 2>/dev/null; then
  rm -rf "$k8s_target"
  if PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
       --target "$k8s_target" -r "$k8s_requirements"; then
    cp "$k8s_requirements" "$k8s_target/.requirements"
  else
    echo "setup: could not install $k8s_requirements; the Kubernetes manifests' test will be skipped" >&2
  fi
fi
