#!/usr/bin/env bash
# check-module-cycles.sh SRC_DIR...: fail if the modules of a Rust crate import each other in a
# cycle (a module uses another when its code outside #[cfg(test)] names `crate::that` or lists it
# in `use crate::{...}`). A module is a file of SRC_DIR, or a folder with a mod.rs (its files
# are parts of it). The edges go to tsort, which reports any loop; -v prints them. `make lint`
# runs it on the daemon's crates (docs/architecture.md).
set -euo pipefail
verbose=0
if [ "${1:-}" = "-v" ]; then verbose=1; shift; fi
[ $# -ge 1 ] || { echo "usage: $0 [-v] SRC_DIR..." >&2; exit 2; }
status=0
for src in "$@"; do
  modules=$( (cd "$src" && ls *.rs 2>/dev/null | sed 's/\.rs$//'; find . -mindepth 2 -maxdepth 2 -name mod.rs | cut -d/ -f2) \
    | grep -vx 'lib\|main' | sort -u)
  edges=$(mktemp)
  for m in $modules; do
    echo "$m $m" >> "$edges"
    files=$( [ -d "$src/$m" ] && find "$src/$m" -name '*.rs' || echo "$src/$m.rs")
    # the code before the first #[cfg(test)], comments dropped
    used=$(for f in $files; do sed '/^#\[cfg(test)\]/,$d; s://.*$::' "$f"; done \
      | grep -oE 'crate::(\{[^}]*\}|[a-z_]+)' | sed 's/crate:://; s/[{}]//g' | tr ', ' '\n\n' | sed 's/::.*//' \
      | grep -xF "$modules" | grep -vx "$m" | sort -u || true)
    for u in $used; do
      echo "$m $u" >> "$edges"
      [ $verbose = 1 ] && echo "$src: $m -> $u"
    done
  done
  if ! tsort "$edges" > /dev/null 2> "$edges.err" || grep -q loop "$edges.err"; then
    echo "check-module-cycles: modules of $src import each other in a cycle:" >&2
    cat "$edges.err" >&2
    status=1
  else
    echo "check-module-cycles: no cycle among the $(echo "$modules" | wc -w) modules of $src"
  fi
  rm -f "$edges" "$edges.err"
done
exit $status
