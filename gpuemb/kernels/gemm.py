"""A plain matmul at a model's compute precision, for the GEMMs outside the fused MLPs (DCN-v2's cross layers, the
dot interaction's Gram products under bf16 and tf32).

``matmul(a, b, precision)`` is ``a @ b``. On a GPU, under a reduced precision, it runs through cuBLASLt with the
compute type that rounds float32 operands as the tensor cores read them and accumulates in float32: ``fp16`` asks
for COMPUTE_32F_FAST_16F, ``bf16`` for COMPUTE_32F_FAST_16BF, ``tf32`` for COMPUTE_32F_FAST_TF32. The arrays stay
float32 on both sides, so the layer around it does not change (docs/precision.md). ``fp32`` keeps CuPy's ``@``
(cuBLAS's default float32 math, as torch's default is). The planned matmuls are the fused MLP's
(``mlp.PLANS``): a shape is planned once. On the CPU only ``fp32`` runs.
"""
from gpuemb.autograd.backend import get_array_module, is_device_array

from . import mlp

COMPUTE = {"fp32": None, "fp16": "COMPUTE_32F_FAST_16F", "bf16": "COMPUTE_32F_FAST_16BF",
           "tf32": "COMPUTE_32F_FAST_TF32"}
assert set(COMPUTE) == set(mlp.PRECISIONS)  # one list of precisions: the MLP's


def matmul(a, b, precision="fp32"):
    """``a @ b`` for float32 ``a`` and ``b``, 2-D or batches of one size (3-D), computed at ``precision``; the result
    is C-contiguous."""
    compute = COMPUTE[precision]
    if compute is None:
        return a @ b
    if not is_device_array(a):
        raise ValueError(f"matmul: precision {precision} runs on a GPU only; the CPU computes in float32, so use "
                         "precision='fp32' there")
    return get_array_module(a).ascontiguousarray(mlp.PLANS.run(a, b, compute=compute))
