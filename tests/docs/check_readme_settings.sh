#!/usr/bin/env bash
# The README's settings table must be exactly what `tandemctl settings --markdown` prints
# from the settings table the library reads. Usage: check_readme_settings.sh TANDEMCTL README
set -euo pipefail
expected=$("$1" settings --markdown)
actual=$(sed -n '/<!-- settings:begin -->/,/<!-- settings:end -->/p' "$2" | sed '1d;$d')
if [ "$expected" != "$actual" ]; then
  echo "FAIL: README settings table differs from 'tandemctl settings --markdown':"
  diff <(echo "$expected") <(echo "$actual") || true
  echo "Regenerate it: replace the block between the settings markers with tandemctl's output."
  exit 1
fi
echo "ok: README lists the $(echo "$expected" | tail -n +3 | wc -l) settings of the table"
