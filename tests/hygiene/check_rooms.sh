#!/usr/bin/env bash
# The rooms of tandemd (docs/architecture.md): the decisions (src/scheduler) and the memory pool
# (src/memory) are pure: they reach no daemon header (the daemon calls them, never the other
# way), no JSON and no socket. Checked twice for every file of the two rooms: its own #include
# lines, then everything it includes, however indirectly (the compiler's -M list with the
# room's include path), so that a header of src/common that pulls in JSON is caught as well.
# usage: check_rooms.sh SOURCE_DIR CXX -I... (the include directories of the rooms' targets)
set -euo pipefail
src=$1/src
cxx=$2
shift 2
# The system's own directory stays where the compiler puts it (-I/usr/include breaks
# libstdc++'s #include_next).
includes=()
for i in "$@"; do [ "$i" = -I/usr/include ] || includes+=("$i"); done
fail=0

daemon_headers=$(cd "$src/daemon" && ls -- *.h)
# JSON and the socket API; in an #include line also a daemon header by its room or its name.
reached_forbidden='nlohmann/|sys/socket\.h|sys/un\.h|netinet/|arpa/inet\.h|netdb\.h'
forbidden="daemon/|$reached_forbidden"
for h in $daemon_headers; do forbidden="$forbidden|[/\"<]${h//./\\.}[\">]"; done

for room in scheduler memory; do
  for f in "$src/$room"/*.h "$src/$room"/*.cpp; do
    if lines=$(grep -nE "^[[:space:]]*#[[:space:]]*include.*($forbidden)" "$f"); then
      echo "FAIL: src/$room/$(basename "$f") includes what its room may not:"
      echo "$lines" | sed 's/^/  /'
      fail=1
      continue
    fi
    # -M: every file the preprocessor opens, system headers too. A header is read as C++.
    if ! deps=$("$cxx" -std=c++20 -M -x c++ "${includes[@]}" "$f" 2>&1); then
      echo "FAIL: src/$room/$(basename "$f") does not preprocess with its room's include path:"
      echo "$deps" | sed -n '1,5s/^/  /p'
      fail=1
      continue
    fi
    reached=$(echo "$deps" | tr ' \\' '\n\n' | grep -E "(^|/)src/daemon/|$reached_forbidden" || true)
    if [ -n "$reached" ]; then
      echo "FAIL: src/$room/$(basename "$f") reaches, through what it includes:"
      echo "$reached" | sort -u | sed -n "1,3{s|^$1/||; s/^/  /; p}"
      fail=1
    fi
  done
done
[ "$fail" = 0 ] && echo "rooms: src/scheduler and src/memory reach no daemon header, no JSON, no socket header"
exit "$fail"
