#!/bin/bash
# Durable submits per second: one xl-scheduler, then three replicas on Raft
# on this same machine, each loaded by the same independent load generator
# (h2load: 4 connections x 16 streams against SubmitJob on the leader).
# Afterwards every job is counted in every replica's database. Prints a
# comparison table; the issue's goal is three replicas >= 50 % of one and
# >= 5,000/s.
#
#   tests/bench/replicas_h2load.sh            # build/ of this checkout
#   XL_BUILD_DIR=/path/to/build N=50000 tests/bench/replicas_h2load.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${XL_BUILD_DIR:-$ROOT/build}
N=${N:-20000}
SCHED=$BUILD/server/xl-scheduler
XLCTL=$BUILD/client/xlctl
command -v h2load >/dev/null || { echo "needs h2load (apt-get install nghttp2-client)"; exit 2; }
tmp=$(mktemp -d /tmp/xl-h2-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

# One SubmitJobRequest as a gRPC frame (no idempotency key: every request a
# new job).
echo 'spec { name: "bench" command: "/bin/true" resources { nodes: 1 } }' |
  protoc --encode=xl.v1.SubmitJobRequest -I "$ROOT/proto" "$ROOT/proto/xl/v1/scheduler.proto" > "$tmp/req.pb"
/usr/bin/python3 - "$tmp/req.pb" "$tmp/submit.grpc" <<'EOF'
import struct, sys
body = open(sys.argv[1], "rb").read()
open(sys.argv[2], "wb").write(b"\0" + struct.pack(">I", len(body)) + body)
EOF

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
limits=(--max-pending-per-user 0 --submit-rate-per-user 0)

load() {  # load ADDRESS -> submits/s
  h2load -n "$N" -c 4 -m 16 -t 1 -H content-type:application/grpc -H te:trailers \
    -d "$tmp/submit.grpc" "http://$1/xl.v1.JobService/SubmitJob" 2>&1 |
    grep -oP "finished in .*?, \K[0-9.]+"
}
count() { /usr/bin/python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*) from jobs').fetchone()[0])" "$1"; }

# One scheduler.
p=$(free_port)
"$SCHED" --listen 127.0.0.1:$p --db "$tmp/one.db" "${limits[@]}" > "$tmp/one.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q listening "$tmp/one.log" && break; sleep 0.1; done
one=$(load 127.0.0.1:$p)
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
one_count=$(count "$tmp/one.db")

# Three replicas.
api=() peers=""
for i in 1 2 3; do
  api+=(127.0.0.1:$(free_port))
  peers+="${peers:+,}$i=127.0.0.1:$(free_port)/${api[-1]}"
done
for i in 1 2 3; do
  "$SCHED" --replica-id $i --peers "$peers" --listen "${api[$((i-1))]}" --db "$tmp/r$i.db" \
    "${limits[@]}" > "$tmp/r$i.log" 2>&1 &
  pids+=($!)
done
list=$(IFS=,; echo "${api[*]}")
leader=""
for _ in $(seq 100); do
  leader=$(XL_SERVER=$list "$XLCTL" servers -o json 2>/dev/null | /usr/bin/python3 -c \
    'import json,sys; print(next((r["address"] for r in json.load(sys.stdin)["replicas"] if r.get("leader")), ""))' || true)
  [ -n "$leader" ] && break
  sleep 0.1
done
[ -n "$leader" ] || { echo "no leader"; tail "$tmp"/r*.log; exit 1; }
three=$(load "$leader")
# Every replica applies every job.
for _ in $(seq 100); do
  c=($(count "$tmp/r1.db") $(count "$tmp/r2.db") $(count "$tmp/r3.db"))
  [ "${c[0]}" = "${c[1]}" ] && [ "${c[1]}" = "${c[2]}" ] && [ "${c[0]}" -ge "$N" ] && break
  sleep 0.1
done

printf '%-28s %12s %s\n' "scheduler" "submits/s" "jobs stored"
printf '%-28s %12.0f %s\n' "one (SQLite, fsync)" "$one" "$one_count"
printf '%-28s %12.0f %s\n' "three replicas (Raft)" "$three" "${c[*]}"
printf 'three / one: %.2f (goal >= 0.50 and >= 5000/s); %s requests each\n' \
  "$(echo "$three / $one" | bc -l)" "$N"
