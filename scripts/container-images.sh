#!/usr/bin/env bash
# Builds the images of deploy/docker/ with podman, for the real-container test
# (tests/e2e/containers_e2e.py, docs/kubernetes.md), without a registry: the base is Debian
# bookworm made here by mmdebstrap from Debian's package mirror. Cached in BUILD_DIR/containers:
# the base once (its tarball kept, so a wiped podman store re-imports it without the network),
# the images again only when the Debian package they install changed. Prints the podman
# configuration to use (CONTAINERS_CONF=...) on its last line.
#   scripts/container-images.sh [BUILD_DIR]
# Exit status 77, saying why, where podman or mmdebstrap is missing or cannot run a container.
set -euo pipefail
build=$(realpath "${1:-build}")
cd "$(dirname "$0")/.."
dir=$build/containers
skip() { echo "SKIP: $*" >&2; exit 77; }
command -v podman >/dev/null || skip "no podman (apt-get install podman runc mmdebstrap)"
command -v mmdebstrap >/dev/null || skip "no mmdebstrap (apt-get install mmdebstrap)"
[ "$(id -u)" = 0 ] || skip "podman's containers need root here"
mkdir -p "$dir"

# podman's default limits ask for more open files than a process without CAP_SYS_RESOURCE may
# have (and podman caps its own process count at 32768, which its containers inherit), and crun
# refuses a cgroup v1 host whose v2 hierarchy holds controllers: the limits this shell has, and
# runc where crun cannot run a container, or is not installed (podman's default is crun, and
# with only runc installed every podman command fails on the configuration).
conf=$dir/containers.conf
export CONTAINERS_CONF=$conf
nproc=$(ulimit -Hu); [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768
write_conf() {
  printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n[engine]\nruntime = "%s"\n' \
    "$(ulimit -Sn)" "$(ulimit -Hn)" "$nproc" "$nproc" "$1" > "$conf"
}
installed_runtime() {
  for runtime in crun runc; do command -v "$runtime" >/dev/null && { echo "$runtime"; return; }; done
  echo crun  # none: podman says so
}
configured=$(sed -n 's/^runtime = "\(.*\)"$/\1/p' "$conf" 2>/dev/null || true)
[ -n "$configured" ] && command -v "$configured" >/dev/null || write_conf "$(installed_runtime)"

base=localhost/tandem-base:bookworm
if ! podman image exists "$base"; then
  if [ ! -f "$dir/base-bookworm.tar" ]; then
    echo "container-images: making a Debian bookworm base with mmdebstrap (once, a few minutes)" >&2
    mmdebstrap --variant=minbase --mode=root --format=tar --quiet bookworm "$dir/base-bookworm.tar.tmp" >&2 \
      || skip "mmdebstrap could not make a base image (is Debian's mirror reachable?)"
    mv "$dir/base-bookworm.tar.tmp" "$dir/base-bookworm.tar"
  fi
  podman import --quiet "$dir/base-bookworm.tar" "$base" >/dev/null
fi
if ! podman run --rm "$base" true 2>"$dir/probe.err"; then
  for runtime in runc crun; do
    command -v "$runtime" >/dev/null || continue
    write_conf "$runtime"
    podman run --rm "$base" true 2>"$dir/probe.err" && break
  done
  podman run --rm "$base" true 2>/dev/null || skip "podman cannot run a container here: $(tail -1 "$dir/probe.err")"
fi

# The Debian package, made again when a binary it holds is newer.
deb=$(ls "$dir"/deb/tandem_*.deb 2>/dev/null | head -1 || true)
newest=$(ls -t "$build/lib/libtandem.so" "$build/bin/tandemd" "$build/bin/tandemctl" \
  "$build/bin/tandem-device-plugin" 2>/dev/null | head -1)
if [ -z "$deb" ] || [ "$newest" -nt "$deb" ]; then
  rm -rf "$dir/deb"
  (cd "$build" && cpack -G DEB -B "$dir/deb" >"$dir/build.log" 2>&1) || { tail -20 "$dir/build.log" >&2; exit 1; }
  deb=$(ls "$dir"/deb/tandem_*.deb | head -1)
fi

# The images, built again when the package or a recipe changed.
key=$(cat "$deb" deploy/docker/* | sha256sum | cut -d' ' -f1)
if [ "$(cat "$dir/images.key" 2>/dev/null)" != "$key" ] || ! podman image exists localhost/tandem:local \
    || ! podman image exists localhost/tandem-app:local; then
  rm -rf "$dir/context" && mkdir -p "$dir/context"
  cp "$deb" deploy/docker/* "$dir/context/"
  for image in tandem:Dockerfile.daemon tandem-app:Dockerfile; do
    podman build --build-arg BASE="$base" -f "$dir/context/${image#*:}" -t "localhost/${image%%:*}:local" \
      "$dir/context" >"$dir/build.log" 2>&1 || { tail -20 "$dir/build.log" >&2; exit 1; }
  done
  echo "$key" > "$dir/images.key"
fi
echo "CONTAINERS_CONF=$conf"
