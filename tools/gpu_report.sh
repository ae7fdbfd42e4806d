#!/usr/bin/env bash
# The GPU report in one command, for a GPU machine without internet access:
#
#     tools/gpu_report.sh OUTDIR
#
# installs the checkout (pip --no-deps: the machine's own cupy, numba-cuda, nvmath-python and h5py are used),
# runs the gpu-marked tests, tools/bench_ops.py and tools/bench_train.py (the torch peer where torch imports),
# and writes OUTDIR/report.md with every output and OUTDIR/*.json. It ends by printing the mlperf config's floor
# at batch 65536 (tools/gpu_floor.py) beside the measured step time. A failing part is recorded and the rest
# still runs; the exit code is the number of parts that failed.
set -u
if [ $# -ne 1 ]; then
    echo "usage: tools/gpu_report.sh OUTDIR (a folder for report.md and the JSON files)" >&2
    exit 2
fi
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$(mkdir -p "$1" && cd "$1" && pwd)"
PY="${PYTHON:-python}"
REPORT="$OUT/report.md"
FAILED=0
cd "$ROOT"

# part TITLE COMMAND...: run COMMAND, keep its output in the report under TITLE, count a failure.
part() {
    local title="$1"; shift
    echo "== $title: $*"
    { echo; echo "## $title"; echo; echo "\`$*\`"; echo; echo '```'; } >> "$REPORT"
    "$@" 2>&1 | tee -a "$REPORT"
    local rc=${PIPESTATUS[0]}
    echo '```' >> "$REPORT"
    if [ "$rc" -ne 0 ]; then
        echo "(exit code $rc)" >> "$REPORT"
        FAILED=$((FAILED + 1))
    fi
}

{
    echo "# gpuemb GPU report, $(date -u +%Y-%m-%d)"
    echo
    echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo unknown)"
    echo "- CPU: $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "- torch: $("$PY" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null || echo 'not installed: no peer column')"
} > "$REPORT"

export GPUEMB_DEVICE=cuda
part "install" "$PY" -m pip install --no-deps --no-build-isolation -q -e .
part "device" "$PY" -c "from gpuemb.autograd import backend; print(backend.device_info())"
part "gpu tests" "$PY" -m pytest -m gpu -q -p no:cacheprovider tests
part "bench_ops" "$PY" tools/bench_ops.py --json "$OUT/bench-ops.json"
part "bench_train kaggle" "$PY" tools/bench_train.py --config kaggle --batch-size 2048 --steps 50 --warmup 10 \
    --json "$OUT/bench-train-kaggle.json"
part "bench_train mlperf, batch 65536" "$PY" tools/bench_train.py --config mlperf --batch-size 65536 \
    --steps 20 --warmup 5 --stores device host --cap 4000000 --json "$OUT/bench-train-mlperf.json"
part "floor of mlperf at batch 65536" "$PY" tools/gpu_floor.py --config mlperf --batch-size 65536 \
    --measured "$OUT/bench-train-mlperf.json" --json "$OUT/floor-mlperf.json"

echo
echo "report: $REPORT ($FAILED part(s) failed)"
exit "$FAILED"
