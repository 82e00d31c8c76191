#!/usr/bin/env bash
# check-layers.sh OBJ...: fail if the objects import each other in a cycle.
#
# An object imports another when it uses a symbol (function or variable) the other defines
# (nm: U in one, T/D/B/R in the other). The edges go to tsort, which reports any loop. Used
# on the emulator's objects (emu/emu.h describes its layers) by `make emu-unit`; prints the
# edges with -v.
set -euo pipefail
verbose=0
if [ "${1:-}" = "-v" ]; then verbose=1; shift; fi
[ $# -ge 2 ] || { echo "usage: $0 [-v] OBJ OBJ..." >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for o in "$@"; do
  n=$(basename "$o" .o)
  nm "$o" | awk '$2 ~ /^[TDBRC]$/ {print $3}' | sort -u > "$tmp/$n.def"
  nm "$o" | awk '$1 == "U" {print $2}' | sort -u > "$tmp/$n.use"
done
: > "$tmp/edges"
for u in "$tmp"/*.use; do
  a=$(basename "$u" .use)
  echo "$a $a" >> "$tmp/edges"   # every object appears, even with no edges
  for d in "$tmp"/*.def; do
    b=$(basename "$d" .def)
    [ "$a" = "$b" ] && continue
    if comm -12 "$u" "$d" | grep -q .; then
      echo "$a $b" >> "$tmp/edges"
      [ $verbose = 1 ] && echo "$a -> $b: $(comm -12 "$u" "$d" | tr '\n' ' ')"
    fi
  done
done
if ! order=$(tsort "$tmp/edges" 2> "$tmp/err"); then
  echo "check-layers: the objects import each other in a cycle:" >&2
  cat "$tmp/err" >&2
  exit 1
fi
grep -q loop "$tmp/err" && { echo "check-layers: a cycle:" >&2; cat "$tmp/err" >&2; exit 1; }
echo "check-layers: no cycle among $# objects (top first: $(echo $order | tr '\n' ' '))"
