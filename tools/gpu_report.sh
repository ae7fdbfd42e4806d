#!/usr/bin/env bash
# The GPU report in one command, for a GPU machine with no network and a short lease:
#
#     tools/gpu_report.sh OUTDIR                 # on the GPU machine, with .whl/ carried (tools/gpu_wheels.sh)
#     tools/gpu_report.sh --dry-run OUTDIR       # every part at tiny shapes on the emulated device (.ci/run)
#     tools/gpu_report.sh --only steps,tests OUTDIR    # some parts again
#
# Parts, in the order that tells the most first (docs/perf/README.md, "On the first GPU run", says how to read
# them): env (the device and the versions), epilogs (which bias-gradient epilogs cuBLASLt plans here:
# tools/gpu_probe_epilogs.py), steps (a few training steps of every model: tools/gpu_steps.py),
# host (the host's cost of one launch, CuPy call, cuBLASLt execute and read back: tools/gpu_host_cost.py), tests
# (the gpu-marked kernel and autograd tests), ops (tools/bench_ops.py), train (tools/bench_train.py, kaggle and
# mlperf at batch 65536 beside the torch peer), precision (tools/gpu_precision_check.py: each precision's error and time
# per GEMM; then mlperf again in tf32 and in bf16, on both sides), floor
# (tools/gpu_floor.py at the same --cap) and suite (the rest
# of the gpu-marked tests: stores, models, training, serving; last, as it takes the longest).
#
# Each part has a time limit of its own, cut further so that the whole run ends by GPU_REPORT_DEADLINE seconds
# (default 480). OUTDIR gets at most 8 files: report.md (every part's output) and one JSON or XML file per part but env and floor (whose figures are in report.md).
# A failing part is recorded and the rest still run; the exit code is 0 whatever failed, and the last lines say
# which parts failed. Python is python3 (the GPU image's), or $PYTHON.
set -u
usage() {
    echo "usage: tools/gpu_report.sh [--dry-run] [--only PART,...] OUTDIR; parts: $ALL_PARTS" >&2
    exit 2
}
ALL_PARTS="env epilogs steps host tests ops train precision floor suite"
DRY=0
ONLY="$ALL_PARTS"
while [ $# -gt 1 ]; do
    case "$1" in
        --dry-run) DRY=1; shift ;;
        --only) ONLY="${2//,/ }"; shift 2 ;;
        *) usage ;;
    esac
done
[ $# -eq 1 ] || usage
case "$1" in -*) usage ;; esac
for p in $ONLY; do
    case " $ALL_PARTS " in *" $p "*) ;; *) echo "tools/gpu_report.sh: unknown part '$p'" >&2; usage ;; esac
done

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$(mkdir -p "$1" && cd "$1" && pwd)"
PY="${PYTHON:-python3}"
REPORT="$OUT/report.md"
START=$(date +%s)
DEADLINE="${GPU_REPORT_DEADLINE:-480}"
FAILED=()
cd "$ROOT"
export PYTHONUNBUFFERED=1

# part NAME LIMIT COMMAND...: run COMMAND for at most LIMIT seconds (less if the deadline is nearer), keep its
# output in the report, and record a failure.
part() {
    local name="$1" limit="$2"; shift 2
    case " $ONLY " in *" $name "*) ;; *) return 0 ;; esac
    local left=$((DEADLINE - ($(date +%s) - START)))
    [ "$limit" -gt "$left" ] && limit=$left
    if [ "$limit" -lt 5 ]; then
        echo "== $name: skipped, the deadline is reached" | tee -a "$REPORT"
        FAILED+=("$name (no time left)")
        return 0
    fi
    echo "== $name (at most ${limit} s): $*"
    { echo; echo "## $name"; echo; echo "\`$*\` (limit ${limit} s)"; echo; echo '```'; } >> "$REPORT"
    local t0=$(date +%s)
    timeout --kill-after=5 "$limit" "$@" 2>&1 | tee -a "$REPORT"
    local rc=${PIPESTATUS[0]}
    echo '```' >> "$REPORT"
    echo "($name: exit code $rc, $(( $(date +%s) - t0 )) s)" | tee -a "$REPORT"
    if [ "$rc" -ne 0 ]; then
        [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && FAILED+=("$name (timed out)") || FAILED+=("$name (exit $rc)")
    fi
}

{
    echo "# gpuemb GPU report, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo
    echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$([ -n "$(git status --porcelain 2>/dev/null)" ] && echo ' (with local changes)')"
    echo "- mode: $([ $DRY -eq 1 ] && echo 'dry run on the emulated device' || echo 'GPU')"
    echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,temperature.gpu --format=csv,noheader 2>/dev/null || echo none)"
    echo "- CPU: $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$REPORT"

if [ $DRY -eq 1 ]; then
    export GPUEMB_DEVICE=emulated NUMBA_ENABLE_CUDASIM=1
    STEPS=(--cases dlrm-shared dcn --batch 4 --steps 1 --profile 3)
    HOST=(--calls 3 --repeats 1)
    TESTS=(tests/gpuemb/kernels/test_mlp.py)
    OPS=(--quick --filter "fused MLP")
    TRAIN=(--config kaggle --batch-size 16 --steps 1 --warmup 1 --cap 100 --stores device --pipeline on --no-torch)
    FLOOR=(--config kaggle --batch-size 16 --cap 100 --quick)
    PRECISION=(--config kaggle --batch-size 16 --steps 1 --warmup 1 --cap 100 --stores device --pipeline on
               --no-torch)
    export PRECISIONS="bf16"  # one is enough to exercise the part; CI's 30 minutes are tight
    SUITE=(--jobs 2 tests/gpuemb/metrics/test_metrics.py tests/gpuemb/store/test_key_types.py)
else
    export GPUEMB_DEVICE=cuda
    # the wheels the image lacks (tools/gpu_wheels.sh), into a scratch folder ahead of the image's packages
    SITE="${TMPDIR:-/tmp}/gpuemb-site"
    if ls .whl/*.whl >/dev/null 2>&1; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
            && export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
        # numba-cuda 0.30.4 compiles no kernel over NumPy 2.5 (NVIDIA/numba-cuda#907): NumPy 2.4 goes ahead of it,
        # and is taken out again if the image's compiled packages do not import over it
        if "$PY" -c "import numpy, sys; sys.exit(tuple(map(int, numpy.__version__.split('.')[:2])) < (2, 5))" \
                && ls .whl/numpy/*.whl >/dev/null 2>&1; then
            echo "- the image's NumPy is 2.5 or later: installing $(basename .whl/numpy/*.whl) ahead of it" | tee -a "$REPORT"
            "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
                .whl/numpy/*.whl
            if ! "$PY" -c "import numpy, cupy, h5py, numba.cuda, torch" >> "$REPORT" 2>&1; then
                echo "- the image's packages do not import over NumPy 2.4: taken out again" | tee -a "$REPORT"
                rm -rf "$SITE"/numpy "$SITE"/numpy-*.dist-info "$SITE"/numpy.libs
            fi
        fi
        if ! "$PY" -c "import nvmath.linalg.advanced" 2>/dev/null && ls .whl/fallback/*.whl >/dev/null 2>&1; then
            echo "- nvmath did not import over the image's cuda-core: installing .whl/fallback" >> "$REPORT"
            "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
                .whl/fallback/*.whl
        fi
    else
        echo "- NO .whl/: nvmath-python is missing, so every MLP fails. Run tools/gpu_wheels.sh and carry .whl" \
            | tee -a "$REPORT"
    fi
    "$PY" -m pip install -q --no-deps --no-build-isolation -e . >> "$REPORT" 2>&1 \
        || echo "- pip install -e . failed; the checkout is imported from its folder" | tee -a "$REPORT"
    STEPS=(--batch 16 --steps 10 --profile 12)
    HOST=(--calls 300 --repeats 5)
    TESTS=(tests/gpuemb/kernels tests/autograd)
    OPS=()
    TRAIN=(--config kaggle mlperf --batch-size 65536 --steps 8 --warmup 3 --cap 1000000 --stores device
           --pipeline on --no-torchrec)
    FLOOR=(--config mlperf --batch-size 65536 --cap 1000000)
    PRECISION=(--config mlperf --batch-size 65536 --steps 8 --warmup 3 --cap 1000000 --stores device --pipeline on
               --no-torchrec)
    export PRECISIONS="tf32 bf16"
    SUITE=(--jobs 8 --timeout 200 tests --ignore=tests/gpuemb/kernels --ignore=tests/autograd)
fi

part env 40 "$PY" -c "
import importlib, platform, sys
print('python', platform.python_version(), sys.executable)
for name in ('numpy', 'numba', 'numba_cuda', 'cupy', 'nvmath', 'cuda.core', 'cuda.bindings', 'h5py', 'torch'):
    try:
        m = importlib.import_module(name)
        print(f'{name:<14}', getattr(m, '__version__', '?'), getattr(m, '__file__', ''))
    except Exception as e:
        print(f'{name:<14} NOT IMPORTABLE: {type(e).__name__}: {e}')
from gpuemb.autograd import backend
print('device', backend.device_info())
"
part epilogs 30 "$PY" tools/gpu_probe_epilogs.py --json "$OUT/epilogs.json"
part steps 130 "$PY" tools/gpu_steps.py "${STEPS[@]}" --json "$OUT/steps.json"
part host 40 "$PY" tools/gpu_host_cost.py "${HOST[@]}" --json "$OUT/host-cost.json"
part tests 70 "$PY" -m pytest -m gpu -q -p no:cacheprovider --junitxml "$OUT/tests.xml" "${TESTS[@]}"
part ops 60 "$PY" tools/bench_ops.py "${OPS[@]}" --json "$OUT/bench-ops.json"
part train 90 "$PY" tools/bench_train.py "${TRAIN[@]}" --json "$OUT/bench-train.json"
part precision 110 bash -c 'rc=0; "$0" tools/gpu_precision_check.py || rc=1
    for p in $PRECISIONS; do "$0" tools/bench_train.py --precision $p "${@}" || rc=1; done; exit $rc' "$PY" "${PRECISION[@]}"
part floor 25 "$PY" tools/gpu_floor.py "${FLOOR[@]}" --measured "$OUT/bench-train.json"
# a process per test file: a CUDA error can poison the context for every later test (the H200's first run of this
# part failed from one test on and was stopped at its limit before pytest wrote a word of why)
part suite 300 "$PY" tools/gpu_suite.py --json "$OUT/suite.json" "${SUITE[@]}"

{
    echo
    echo "## summary"
    echo
    echo "$(( $(date +%s) - START )) s in all; parts run: $ONLY"
    if [ ${#FAILED[@]} -eq 0 ]; then echo "every part passed"; else echo "FAILED: ${FAILED[*]}"; fi
} | tee -a "$REPORT"
exit 0
