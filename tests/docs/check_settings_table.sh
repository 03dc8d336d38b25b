#!/usr/bin/env bash
# docs/settings.md's table must be exactly what `tandemctl settings --markdown` prints from the
# settings table the library reads. Usage: check_settings_table.sh TANDEMCTL docs/settings.md
set -euo pipefail
expected=$("$1" settings --markdown)
actual=$(sed -n '/<!-- settings:begin -->/,/<!-- settings:end -->/p' "$2" | sed '1d;$d')
if [ "$expected" != "$actual" ]; then
  echo "FAIL: $2's settings table differs from 'tandemctl settings --markdown':"
  diff <(echo "$expected") <(echo "$actual") || true
  echo "Regenerate it: replace the block between the settings markers with tandemctl's output."
  exit 1
fi
echo "ok: $2 lists the $(echo "$expected" | tail -n +3 | wc -l) settings of the table"
