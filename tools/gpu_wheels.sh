#!/usr/bin/env bash
# The wheels the GPU machine lacks, for a machine with no network: nvmath-python (cuBLASLt) for CPython 3.12 on
# manylinux x86-64, into the git-ignored .whl/ that travels with tools/gpu_report.sh.
#
#     tools/gpu_wheels.sh            # .whl/*.whl for the device, .whl/fallback/ and .whl/host/
#
# The device image already has cuda-bindings, cuda-core, cuda-pathfinder and numpy, nvmath's requirements, and the
# CUDA 13 libraries cuBLASLt needs (docs/perf/README.md, "On the first GPU run"); so only nvmath travels in .whl/.
# .whl/numpy/ holds NumPy 2.4, for an image whose NumPy is 2.5 or later: numba-cuda 0.30.4 registers an overload of
# np.row_stack, which NumPy 2.5 removed, so it compiles no kernel there (NVIDIA/numba-cuda#907, which its
# maintainers will not fix). The report installs it only over such a NumPy.
# .whl/fallback/ holds cuda-core and cuda-pathfinder at the versions nvmath was checked with here: the report
# installs them only if nvmath does not import over the image's own. .whl/host/ holds nvmath for this machine's
# Python, so that tests/autograd/emulated/test_nvmath_api.py can check the emulated nvmath's signatures against it.
set -euo pipefail
cd "$(dirname "$0")/.."
NVMATH="${NVMATH_VERSION:-1.0.0}"
NUMPY="${NUMPY_VERSION:-2.4.6}"
CUDA_CORE="${CUDA_CORE_VERSION:-1.2.2}"
PATHFINDER="${CUDA_PATHFINDER_VERSION:-1.9.1}"
PY="${PYTHON:-python3}"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
download() {  # folder, requirement...: wheels for CPython 3.12 on manylinux x86-64
    local dest=$1; shift
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${platforms[@]}" -d "$dest" "$@"
}
rm -rf .whl && mkdir -p .whl/fallback .whl/host .whl/numpy
download .whl "nvmath-python==$NVMATH"
download .whl/numpy "numpy==$NUMPY"
download .whl/fallback "cuda-core==$CUDA_CORE" "cuda-pathfinder==$PATHFINDER"
"$PY" -m pip download -q --no-deps --only-binary=:all: -d .whl/host "nvmath-python==$NVMATH"
ls -l .whl .whl/fallback .whl/host .whl/numpy
du -sh .whl
