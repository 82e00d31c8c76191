#!/usr/bin/env bash
# run.sh [strata|redis|emu-redis] [WORKLOAD] [RECORDS] [OPERATIONS] [THREADS]: the real YCSB
# client (site.ycsb:core 0.17.0) loads and runs a workload against a server of its own, through
# the StrataKvClient binding, and fails unless every operation returned OK. emu-redis is
# Debian's Redis built for the emulated machine (strata emu pkg build redis) running under
# strata emu run ($STRATA_EMU_ARGS, default --preset m2t --fast-bytes 64M); its report follows.
#   bench/ycsb-binding/run.sh strata a 20000 100000 2
#   bench/ycsb-binding/run.sh redis  a 20000 100000 2
#   bench/ycsb-binding/run.sh emu-redis c 20000 20000 1
set -euo pipefail
target=${1:-strata} workload=${2:-a} records=${3:-20000} ops=${4:-100000} threads=${5:-2}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
jar=$here/target/strata-ycsb-binding-0.1.0.jar
[ -f "$jar" ] || (cd "$here" && mvn -q -B package)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
case $target in
  strata) "$root/target/release/strata" kv serve --addr "127.0.0.1:$port" --buckets $((records / 4 + 1)) 2>/dev/null & ;;
  redis) redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no >/dev/null 2>&1 & ;;
  emu-redis)
    redis=$("$root/target/release/strata" emu pkg list --json | python3 -c \
      'import json,sys; print(next((b["binaries"][0] for b in json.load(sys.stdin) if b["name"] == "redis"), ""))')
    [ -n "$redis" ] || { echo "$0: build Redis first: strata emu pkg build redis" >&2; exit 2; }
    report=$(mktemp)
    # shellcheck disable=SC2086 # STRATA_EMU_ARGS is a list of options
    "$root/target/release/strata" emu run ${STRATA_EMU_ARGS:---preset m2t --fast-bytes 64M} -- "$redis" \
      --port "$port" --bind 127.0.0.1 --save "" --appendonly no --logfile /dev/null >"$report" 2>/dev/null & ;;
  *) echo "usage: $0 [strata|redis|emu-redis] [workload] [records] [operations] [threads]" >&2; exit 2 ;;
esac
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 300); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
cp="$jar:$here/target/lib/*"
common=(-db site.ycsb.db.strata.StrataKvClient -P "$here/workloads/workload$workload" -p strata.port="$port"
        -p recordcount="$records" -p operationcount="$ops" -threads "$threads")
status=0
for phase in -load -t; do
  out=$(java -cp "$cp" site.ycsb.Client $phase "${common[@]}" 2>/dev/null)
  echo "$out" | grep -E '^\[(OVERALL|READ|UPDATE|INSERT|READ-MODIFY-WRITE)\], (Throughput|Operations|Return)'
  # every operation must have returned OK
  done_ops=$(echo "$out" | awk -F', ' '/^\[(READ|UPDATE|INSERT|READ-MODIFY-WRITE)\], Operations/ {s += $3} END {print s+0}')
  ok_ops=$(echo "$out" | awk -F', ' '/^\[(READ|UPDATE|INSERT|READ-MODIFY-WRITE)\], Return=OK/ {s += $3} END {print s+0}')
  want=$([ "$phase" = -load ] && echo "$records" || echo "$ops")
  if [ "$done_ops" -lt "$want" ] || [ "$ok_ops" -ne "$done_ops" ]; then
    echo "FAIL ycsb $phase against $target: $ok_ops of $done_ops operations OK (expected $want)" >&2
    status=1
  fi
done
if [ "$target" = emu-redis ]; then
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$server" || status=1
  grep -E '^(emulated machine|simulated time|accesses|node|[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+$)' "$report" || { cat "$report"; status=1; }
  rm -f "$report"
fi
[ $status -eq 0 ] && echo "ycsb workload $workload against $target: 1 passed, 0 failed"
exit $status
