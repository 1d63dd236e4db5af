#!/bin/bash
# The one prepared device check of xl-train (issue: xl-train on real GPU
# fleets). On a machine with an NVIDIA GPU, CUDA 13 and this repository's
# Debian build dependencies, in under 8 minutes:
#   1. builds xl-train, the GPU tests and the GPU benchmark (build-gpu/,
#      sm_90 only unless XL_CUDA_ARCHS says otherwise: the device is known);
#   2. runs ctest -L gpu;
#   3. the MFU benchmark at width 8192 in bf16 and fp16, with the planner's
#      predicted peak memory beside the measured one;
#   4. a 2-rank NCCL data-parallel xl-train run when there are two GPUs;
# and prints one table. Exit 0 when every step ran and met its goal, 1 when
# one fell short (the table says which), 2 when it could not run.
#   tests/gpu/run_on_device.sh [build dir, default build-gpu]
set -u
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
ARCHS=${XL_CUDA_ARCHS:-90}
JOBS=$(nproc)
T0=$(date +%s)
declare -a ROWS
row() { ROWS+=("$(printf '%-44s %-22s %-14s %s' "$1" "$2" "$3" "$4")"); }
elapsed() { echo $(( $(date +%s) - T0 ))s; }
fail=0

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "run_on_device: no NVIDIA GPU here (nvidia-smi -L fails); nothing to check"
  exit 2
fi
GPUS=$(nvidia-smi -L | grep -c '^GPU')
nvidia-smi -L

# 1. Build.
if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
     -DBUILD_TESTING=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" >"$BUILD.cmake.log" 2>&1; then
  tail -30 "$BUILD.cmake.log"; echo "run_on_device: cmake failed (are the Debian build dependencies installed? deploy/install-deps)"; exit 2
fi
TARGETS="xl-train gpu_mlp_bench worker_gpu_cuda_kernels_test worker_gpu_cuda_trainer_test worker_gpu_nccl_collective_test"
if ! cmake --build "$BUILD" -j"$JOBS" --target $TARGETS >"$BUILD.build.log" 2>&1; then
  tail -40 "$BUILD.build.log"; echo "run_on_device: build failed"; exit 2
fi
row "build (sm_$ARCHS)" "ok" "" "$(elapsed)"

# 2. GPU tests.
if (cd "$BUILD" && ctest -L gpu --timeout 300 --output-on-failure) >"$BUILD.ctest.log" 2>&1; then
  row "ctest -L gpu" "$(grep -Eo '[0-9]+ tests? passed|100% tests passed.*' "$BUILD.ctest.log" | head -1)" "all pass" "$(elapsed)"
else
  fail=1
  row "ctest -L gpu" "FAILED: $(grep -Eo '[0-9]+ tests failed out of [0-9]+' "$BUILD.ctest.log")" "all pass" "$(elapsed) see $BUILD.ctest.log"
  grep -A20 "Failed\|FAILED" "$BUILD.ctest.log" | head -60
fi

# 3. MFU at width 8192, bf16 and fp16; planner memory check, also for the
#    batch batch_per_rank: auto picks (the largest the planner says fits).
for run in "bf16 8192" "fp16 8192" "bf16 auto"; do
  set -- $run; p=$1; batch=$2
  out=$("$BUILD/tests/bench/gpu_mlp_bench" --hidden 8192 --layers 8 --input 512 \
        --batch $batch --steps 30 --warmup 6 --precision $p 2>&1)
  echo "$out" | grep -v '^ROW'
  r=$(echo "$out" | grep '^ROW' | tail -1)
  if [ -z "$r" ]; then
    fail=1; row "MFU width 8192 $p batch $batch" "did not run" ">= 60%" "$(echo "$out" | tail -2 | tr '\n' ' ')"; continue
  fi
  get() { echo "$r" | tr ' ' '\n' | grep "^$1=" | cut -d= -f2; }
  mfu=$(get mfu_pct); off=$(get off_pct)
  ok=$(awk -v m="$mfu" 'BEGIN{print (m >= 60) ? "met" : "NOT met"}')
  [ "$ok" = met ] || fail=1
  row "MFU width 8192 $p batch $(get batch) ($(get samples_s)/s)" "$mfu% of $(get peak_tflops) TF" ">= 60%" "$ok"
  ok=$(awk -v o="$off" -v m="$(get measured_gib)" 'BEGIN{o = o < 0 ? -o : o; print (m > 0 && o <= 10) ? "met" : "NOT met"}')
  [ "$ok" = met ] || fail=1
  row "memory $p batch $(get batch): planner vs measured" "$(get predicted_gib) / $(get measured_gib) GiB" "within 10%" "$ok ($off%)"
done

# 4. Two ranks over NCCL (one per GPU), when there are two GPUs.
if [ "$GPUS" -ge 2 ]; then
  rdv=$(mktemp -d); pids=()
  spec='{"input_dim":1024,"hidden_dim":4096,"hidden_layers":4,"classes":16,"batch_per_rank":1024,"steps":60,"metrics_every":20,"device":"cuda","precision":"BF16"}'
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 XL_NODE_ADDRESS=127.0.0.1 \
      timeout 240 "$BUILD/agent/worker/xl-train" --spec-json "$spec" \
      --rendezvous-dir "$rdv" >"$rdv/rank$r.log" 2>&1 &
    pids+=($!)
  done
  rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done
  line=$(grep '^step 60/60' "$rdv/rank0.log" | tail -1)
  if [ $rc -eq 0 ] && [ -n "$line" ]; then
    row "2-rank NCCL data parallel" "$(echo "$line" | grep -Eo 'samples/s [0-9]+|allreduce [0-9.]+ms \([0-9.]+ Gbit/s\)' | tr '\n' ' ')" "runs" "ok"
  else
    fail=1; row "2-rank NCCL data parallel" "FAILED" "runs" "$(tail -3 "$rdv/rank0.log" | tr '\n' ' ')"
  fi
  rm -rf "$rdv"
else
  row "2-rank NCCL data parallel" "skipped: $GPUS GPU" "runs" "needs 2 GPUs"
fi

echo
printf '%-44s %-22s %-14s %s\n' "check" "measured" "goal" "result"
for r in "${ROWS[@]}"; do echo "$r"; done
echo "total $(elapsed)"
exit $fail
