#!/usr/bin/env bash
# The Debian packages, installed for real: builds xl-scheduler, xl-agent and
# xlctl .debs with CPack, installs them with apt, checks what they put where
# (units with KillMode=process for the agent, config files, the xl user,
# bash completion), then runs a training job through the installed binaries
# started from config files (systemd does not run in CI's container; where
# it does, `systemctl start xl-scheduler` runs the same binaries), and
# removes the packages again.
# Usage: install_test.sh BUILD_DIR    (as root)
set -euo pipefail
BUILD="$(cd "$1" && pwd)"
# 77: ctest's SKIP_RETURN_CODE for this test.
if [ "$(id -u)" -ne 0 ]; then echo "skip: needs root to install packages"; exit 77; fi
for p in xl-scheduler xl-agent xlctl; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    echo "skip: $p is installed on this machine; the test would replace and then remove it"
    exit 77
  fi
done
work=$(mktemp -d /tmp/xl-package-test.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq --purge xl-scheduler xl-agent xlctl >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "== $f"; tail -20 "$f"; done; exit 1; }

echo "== cpack"
(cd "$BUILD" && cpack -G DEB -B "$work/debs" >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; fail "cpack"; }
ls "$work"/debs/*.deb
for p in xl-scheduler xl-agent xlctl; do
  ls "$work"/debs/${p}_*_amd64.deb >/dev/null || fail "no $p package"
done
echo "== apt install"
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$work"/debs/xl-scheduler_*.deb \
  "$work"/debs/xl-agent_*.deb "$work"/debs/xlctl_*.deb >"$work/apt.log" 2>&1 || { cat "$work/apt.log"; fail "apt install"; }

echo "== files"
for f in /usr/bin/xl-scheduler /usr/bin/xl-agent /usr/bin/xl-rank-shim /usr/bin/xl-train /usr/bin/xlctl \
         /usr/lib/systemd/system/xl-scheduler.service /usr/lib/systemd/system/xl-agent.service \
         /etc/xl/scheduler.toml /etc/xl/agent.toml /usr/share/bash-completion/completions/xlctl \
         /usr/share/xl/grafana/xl-dashboard.json; do
  [ -e "$f" ] || fail "$f is not installed"
done
grep -q '^KillMode=process' /usr/lib/systemd/system/xl-agent.service || fail "the agent's unit would kill its ranks on restart"
getent passwd xl >/dev/null || fail "no xl user"
[ "$(stat -c %U /var/lib/xl)" = xl ] || fail "/var/lib/xl is not the xl user's"
[ "$(stat -c %a /etc/xl/agent.toml)" = 600 ] || fail "/etc/xl/agent.toml (it may hold a join token) is not private"
dpkg-query -W -f='${Conffiles}\n' xl-scheduler | grep -q /etc/xl/scheduler.toml || fail "scheduler.toml is not a conffile"
/usr/bin/xl-scheduler --help >/dev/null || fail "xl-scheduler --help"
/usr/bin/xl-agent --help >/dev/null || fail "xl-agent --help"

echo "== a job through the installed binaries, configured by files"
cat > "$work/scheduler.toml" <<EOC
listen = "127.0.0.1:0"
db = "$work/xl.db"
port-file = "$work/port"
heartbeat-interval = 0.2
heartbeat-timeout = 3
metrics-listen = "127.0.0.1:0"
metrics-port-file = "$work/mport"
EOC
/usr/bin/xl-scheduler --config "$work/scheduler.toml" >"$work/scheduler.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do [ -s "$work/port" ] && break; sleep 0.1; done
[ -s "$work/port" ] || fail "the installed scheduler did not start"
port=$(cat "$work/port")
for n in a b; do
  cat > "$work/agent-$n.toml" <<EOC
scheduler = "127.0.0.1:$port"
work-dir = "$work/agent-$n"
name = "pkg-$n"
heartbeat-interval-ms = 200
run-as = "agent"
allow-root-jobs = true
drain = true
EOC
  /usr/bin/xl-agent --config "$work/agent-$n.toml" >"$work/agent-$n.log" 2>&1 &
  pids+=($!)
done
export XL_SERVER="127.0.0.1:$port" XL_USER=packager
for _ in $(seq 1 100); do
  nodes_json=$(/usr/bin/xlctl nodes -o json)
  [ "$(grep -c '"READY"' <<<"$nodes_json")" -ge 2 ] && break; sleep 0.2
done
cat > "$work/job.yaml" <<'EOJ'
name: packaged
resources: {nodes: 2, ranks_per_node: 1, gpus_per_node: 0}
env: {OMP_NUM_THREADS: "1", OPENBLAS_NUM_THREADS: "1"}
train: {input_dim: 32, hidden_dim: 64, hidden_layers: 2, classes: 8,
        batch_per_rank: 32, steps: 200, learning_rate: 0.003, metrics_every: 20,
        device: cpu}
EOJ
id=$(/usr/bin/xlctl submit "$work/job.yaml")
/usr/bin/xlctl wait "$id" --timeout 180s || { /usr/bin/xlctl get "$id"; /usr/bin/xlctl logs "$id" | tail -20; fail "job $id did not succeed"; }
# Whole outputs first: grep -q leaves a pipe early, and pipefail would
# count the writer's SIGPIPE.
job_json=$(/usr/bin/xlctl get "$id" -o json)
grep -q '"SUCCEEDED"' <<<"$job_json" || fail "job $id is not SUCCEEDED"
logs=$(/usr/bin/xlctl logs "$id")
grep -q "xl-train" <<<"$logs" || fail "no xl-train output in the job's logs"
mport=$(cat "$work/mport")
metrics=$(curl -sf "http://127.0.0.1:$mport/metrics")
grep -q '^xl_jobs_finished_total{state="SUCCEEDED"} 1' <<<"$metrics" \
  || fail "the installed scheduler's /metrics does not count the job"
echo "PASS: packages install, and job $id ran through the installed binaries"
