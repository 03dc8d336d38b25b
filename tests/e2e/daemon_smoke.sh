#!/usr/bin/env bash
# tandemd end to end: starts, answers tandemctl, refuses a second daemon on the same socket,
# replaces a stale socket file, removes its socket on SIGTERM. Usage: daemon_smoke.sh BUILD_DIR
set -euo pipefail
bin=$1/bin
dir=$(mktemp -d /tmp/tandemd-smoke.XXXXXX)
sock=$dir/run/tandemd.sock
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
wait_for_socket() { for _ in $(seq 100); do [ -S "$sock" ] && return 0; sleep 0.05; done; fail "no socket at $sock"; }

"$bin/tandemd" --foreground --socket "$sock" --log warn & pid=$!
wait_for_socket
[ "$(stat -c %a "$sock")" = 660 ] || fail "socket mode is $(stat -c %a "$sock"), not 660"
"$bin/tandemctl" status --socket "$sock" | grep -q "policy fill" || fail "tandemctl status"
"$bin/tandemctl" status --json --socket "$sock" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["daemon"]["policy"]=="fill"' \
  || fail "tandemctl status --json"
if "$bin/tandemd" --foreground --socket "$sock" 2>"$dir/second.err"; then fail "a second daemon started"; fi
grep -q "already serving" "$dir/second.err" || fail "second daemon's message: $(cat "$dir/second.err")"
kill -TERM $pid
wait $pid || fail "tandemd exited with $? on SIGTERM"
[ ! -e "$sock" ] || fail "socket left behind after SIGTERM"

# A stale socket file (its daemon killed) is replaced.
"$bin/tandemd" --foreground --socket "$sock" --log warn & pid=$!
wait_for_socket
kill -KILL $pid; wait $pid 2>/dev/null || true
[ -S "$sock" ] || fail "expected a stale socket file"
"$bin/tandemd" --foreground --socket "$sock" --log warn & pid=$!
sleep 0.3
"$bin/tandemctl" status --socket "$sock" >/dev/null || fail "daemon did not replace the stale socket"
kill -TERM $pid; wait $pid
"$bin/tandemctl" status --socket "$sock" 2>/dev/null && fail "tandemctl should fail without a daemon"
"$bin/tandemd" --policy nonsense --socket "$sock" 2>/dev/null && fail "bad policy accepted"
echo "daemon smoke: ok"
