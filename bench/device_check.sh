#!/usr/bin/env bash
# The checks to run in one call on a lent accelerator (a GPU JAX can see), each logged apart:
#   machine.txt      the device JAX sees, the versions
#   demo_cold.log    `fabricjax analyze scenarios/quickstart.yaml`, first run (compiling)
#   demo_warm.log    the same again (the executable cache warm)
#   all_to_all.log   `fabricjax analyze scenarios/all-to-all-4096.yaml` (16.8M flows), timed
#   bench_dynamic.log  bench/bench_dynamic.py: the dynamic level's targets and two htsim cases
#   bench_scale.log  bench/bench_scale.py, mrc rows: an iteration against the device's measured
#                    streaming bandwidth (the "within 3x of the memory bound" check)
#   target.log       bench/bench_scale.py --target: the 131,072-GPU ring step, three policies
#   tests.log        the quick suite (`make test`'s selection) in the time left, stopped with
#                    pytest's summary when it runs out; without tests/test_packaging.py, which
#                    builds a wheel from a package index that a lent machine cannot reach
#   summary.txt      each step's exit status and seconds
#
# Usage: bench/device_check.sh OUT_DIR [TOTAL_SECONDS]. Run from the repository root, with the
# project's wheel and the dependencies the machine lacks installed into the interpreter's own
# site-packages (`pip install --no-index --no-deps WHEELS`): the suite's subprocesses start
# with a clean environment and do not see a PYTHONPATH. PYTHON picks the interpreter. Every
# step has a limit of its own and none runs past TOTAL_SECONDS (540) from the start, so the
# call fits a lease; a step that fails or runs out of time is recorded and the next one runs.
set -uo pipefail
out=${1:?usage: bench/device_check.sh OUT_DIR [TOTAL_SECONDS]}
deadline=$(( $(date +%s) + ${2:-540} ))
py=${PYTHON:-python3}
# several test workers share the GPU: each takes memory as it needs it, not 75% up front
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
mkdir -p "$out"

{ nvidia-smi -L 2>&1 || true
  nproc
  "$py" -c "import sys, jax, numpy; print(sys.version.split()[0], 'jax', jax.__version__,
'numpy', numpy.__version__, jax.devices())"; } > "$out/machine.txt" 2>&1

step() {   # step NAME SECONDS COMMAND...: run it under a time limit (SIGINT first: pytest
           # then prints its summary), log its output, record its status and time
    local name=$1 limit=$2 start rc
    shift 2
    start=$(date +%s)
    (( limit > deadline - start - 20 )) && limit=$(( deadline - start - 20 ))
    if (( limit < 10 )); then echo "$name skipped: no time left" | tee -a "$out/summary.txt"; return; fi
    timeout -s INT -k 15 "$limit" "$@" > "$out/$name.log" 2>&1
    rc=$?
    echo "$name rc=$rc $(( $(date +%s) - start ))s" | tee -a "$out/summary.txt"
}

step demo_cold 120 "$py" -m fabricjax_cli.main analyze scenarios/quickstart.yaml
step demo_warm 60 "$py" -m fabricjax_cli.main analyze scenarios/quickstart.yaml
step all_to_all 90 "$py" -m fabricjax_cli.main analyze scenarios/all-to-all-4096.yaml -q
step bench_dynamic 150 "$py" bench/bench_dynamic.py --repeat 2
step bench_scale 120 "$py" bench/bench_scale.py --sizes 1k,8k,32k,131k --policies mrc \
    --sets 1k:20,8k:10,32k:4,131k:2 --no-target
step target 90 "$py" bench/bench_scale.py --target
step tests 100000 "$py" -m pytest -q -m "not slow" -n 8 -p no:cacheprovider \
    --ignore=tests/test_packaging.py
