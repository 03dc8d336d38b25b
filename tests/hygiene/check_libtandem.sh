#!/usr/bin/env bash
# libtandem.so must load into any container: its only run-time dependencies are glibc's
# libraries, and it exports exactly the hooked driver and NVML symbols, dlsym and the client API.
set -euo pipefail
lib=$1
def=$2
fail=0

needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
for n in $needed; do
  case "$n" in
    libc.so.6|libdl.so.2|libpthread.so.0|libm.so.6|librt.so.1|ld-linux*.so.*) ;;
    *) echo "FAIL: libtandem.so needs $n (only glibc is allowed)"; fail=1 ;;
  esac
done
if readelf -d "$lib" | grep -q 'libstdc++\|libgcc_s'; then
  echo "FAIL: libstdc++/libgcc must be linked statically"; fail=1
fi

exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort)
hooked=$(sed -n 's/^HOOK(\([A-Za-z0-9_]*\),.*/\1/p' "$def" | sort)
# The stream operations driver_api.def includes from green_stream_ops.def.
green=$(sed -n 's/^GREEN_[A-Z_]*OP(\([A-Za-z0-9_]*\),.*/\1/p' "$(dirname "$def")/green_stream_ops.def")
hooked=$(printf '%s\n%s\n' "$hooked" "$green" | sort)
# NVML's hooked symbols: nvml_api.def beside driver_api.def.
nvml=$(sed -n 's/^NVML_HOOK(\([A-Za-z0-9_]*\),.*/\1/p' "$(dirname "$def")/nvml_api.def" | sort)
# The client API: every function declared in include/tandem/client.h.
header="$(dirname "$0")/../../include/tandem/client.h"
api=$(printf 'dlsym\n%s\n' "$(sed -n 's/^[a-z].*[ *]\(tandem_[a-z_]*\)(.*/\1/p' "$header")")
expected=$(printf '%s\n%s\n%s\n' "$hooked" "$nvml" "$api" | sort)
if [ "$exported" != "$expected" ]; then
  echo "FAIL: exported symbols differ from driver_api.def + nvml_api.def + client API:"
  diff <(echo "$expected") <(echo "$exported") || true
  fail=1
fi
[ "$fail" = 0 ] && echo "ok: needs only glibc ($(echo $needed)); exports $(echo "$exported" | wc -l) symbols"
exit $fail
