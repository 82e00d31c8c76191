#!/usr/bin/env bash
# real_programs.sh LIBSTRATA_SO: programs no one here wrote, run with and without Strata
# preloaded; their outputs must be identical, and each preloaded run must have written a
# Strata report (proof that Strata served its allocations).
set -euo pipefail
so=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0

# run NAME CMD...: once plain, once preloaded; compare stdout+exit status
run() {
  local name=$1; shift
  local plain=$work/$name.plain preload=$work/$name.preload rc1=0 rc2=0
  (cd "$work" && "$@") >"$plain" 2>&1 || rc1=$?
  (cd "$work" && LD_PRELOAD=$so STRATA_REPORT="$work/report.$name.%p.json" "$@") >"$preload" 2>&1 || rc2=$?
  if [ $rc1 -ne $rc2 ] || ! cmp -s "$plain" "$preload"; then
    echo "FAIL $name: outputs differ (exit $rc1 vs $rc2)"; diff "$plain" "$preload" | head -5; fail=$((fail+1))
  elif ! ls "$work"/report."$name".*.json >/dev/null 2>&1; then
    echo "FAIL $name: no Strata report: the preload did not take"; fail=$((fail+1))
  else
    echo "ok   $name ($(wc -c <"$plain") bytes of output, $(ls "$work"/report."$name".*.json | wc -l) process(es) reported)"; pass=$((pass+1))
  fi
}

# python3: an allocation-heavy script (dicts, lists, strings, big buffers)
cat >"$work/alloc.py" <<'PY'
import hashlib, json
d = {}
for i in range(200000):
    d["k%d" % i] = [i, str(i) * (i % 7), {"x": i % 13}]
blobs = [bytes([i % 256]) * (i * 37 % 70000) for i in range(2000)]
h = hashlib.sha256()
for k in sorted(d)[:50000]:
    h.update(json.dumps(d[k]).encode())
for b in blobs:
    h.update(b)
print(len(d), sum(map(len, blobs)), h.hexdigest())
PY
run python3 python3 alloc.py

# git: a repository with history, then log, diff and gc
run git sh -c 'export GIT_AUTHOR_DATE="2026-01-01T00:00:00Z" GIT_COMMITTER_DATE="2026-01-01T00:00:00Z" \
  GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t HOME=$PWD;
  rm -rf repo && git init -q repo && cd repo &&
  for i in $(seq 1 30); do seq $i 3 $((i*200)) > f$((i%7)).txt; git add -A; git commit -qm "c$i"; done &&
  git log --stat --format="%H %s" | head -200 && git gc -q && git fsck 2>&1 && git diff HEAD~5 --stat'

# sqlite3: a scripted workload
cat >"$work/w.sql" <<'SQL'
CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, v BLOB);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 50000)
INSERT INTO t(k, v) SELECT 'key' || x, zeroblob(x % 300) FROM c;
CREATE INDEX tk ON t(k);
SELECT count(*), sum(length(v)), max(k) FROM t;
SELECT k FROM t WHERE k LIKE 'key4999%' ORDER BY k;
DELETE FROM t WHERE id % 3 = 0;
VACUUM;
SELECT count(*), sum(length(v)) FROM t;
SQL
run sqlite3 sh -c 'rm -f db && sqlite3 db < w.sql'

# perl: hashes and strings (Debian's perl uses the system malloc)
run perl perl -e 'my %h; for my $i (1..300000) { $h{"k$i"} = "v" x ($i % 97) } my $s = 0; $s += length($h{$_}) for keys %h; my @a = sort { $a cmp $b } keys %h; print "$s $a[0] $a[-1]\n"'

# gcc: compile and run a program
cat >"$work/prog.c" <<'C'
#include <stdio.h>
int main(void) { unsigned long s = 0; for (int i = 0; i < 1000; i++) s += (unsigned long)i * i; printf("%lu\n", s); return 0; }
C
run gcc sh -c 'gcc -O2 -o prog prog.c && ./prog'

# multi-threaded: xz with two threads, sort with two threads
seq 1 400000 | awk '{ print ($1 * 7919) % 100003, $1 }' >"$work/data.txt"
run xz sh -c 'xz -T2 -9 -c data.txt | xz -d -T2 | md5sum; xz -T2 -c data.txt | md5sum'
run sort sh -c 'sort --parallel=2 -S 8M -n data.txt | md5sum'

echo "real programs under LD_PRELOAD: $pass passed, $fail failed"
[ $fail -eq 0 ]
