#!/usr/bin/env bash
# headers.sh INCLUDE_DIR — compile each public header alone, as C11 and as
# C++ (g++, -std=c++11), with -Wall -Wextra -Wpedantic -Werror; fails on the
# first one that does not, and when there are no headers at all. The umbrella
# header dynapipe/dynapipe.h must include every other public header.
set -euo pipefail
inc=$1
cc=${CC:-cc}
n=0
for h in "$inc"/dynapipe/*.h; do
  name=${h#"$inc"/}
  printf '#include "%s"\nint dyn_header_check;\n' "$name" |
    "$cc" -x c -std=c11 -Wall -Wextra -Wpedantic -Werror -I"$inc" -fsyntax-only - ||
    { echo "headers: $name does not compile as C11" >&2; exit 1; }
  printf '#include "%s"\nint dyn_header_check;\n' "$name" |
    g++ -x c++ -std=c++11 -Wall -Wextra -Wpedantic -Werror -I"$inc" -fsyntax-only - ||
    { echo "headers: $name does not compile as C++" >&2; exit 1; }
  n=$((n + 1))
done
for h in "$inc"/dynapipe/*.h; do
  name=${h#"$inc"/}
  [ "$name" = dynapipe/dynapipe.h ] && continue
  grep -q "^#include \"$name\"" "$inc/dynapipe/dynapipe.h" ||
    { echo "headers: dynapipe/dynapipe.h does not include $name" >&2; exit 1; }
done
[ "$n" -gt 0 ] || { echo "headers: no headers under $inc/dynapipe" >&2; exit 1; }
echo "headers: $n public headers compile as C11 and C++"
