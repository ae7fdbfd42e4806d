"""Fused MLP: linear layers whose bias, ReLU and dropout run in the matmul's epilogue, forward and backward.

Layout: x is ``[B, in]`` row-major, ``W`` is ``[out, in]`` as in ``torch.nn.Linear``, ``y = x @ W.T + b``. cuBLASLt
is column-major and puts its bias, ReLU bitmask and bias gradient along M, the rows of its result. A row-major
``[B, out]`` y is a column-major ``[out, B]`` matrix, so the GPU computes ``yᵀ = W @ xᵀ`` with M = out: the
bias then runs along the output features, one sample's mask bits are one column of the bitmask (our row-major
mask rows, padded to 4 words), and ``W`` is used as stored, with no copy.

Three steps make a layer's forward and backward; each has a NumPy reference, a CPU version and a GPU version:
- ``linear_forward``: ``y = act(x @ W.T + b)``, act one of none, ReLU, or ReLU + dropout (relu_dropout.py);
  CPU: a BLAS matmul, then one numba pass for bias + ReLU + dropout + mask. GPU: the BIAS or RELU_AUX_BIAS
  epilogue; with dropout, RELU_BIAS and the relu_dropout kernel in place on the result.
- ``weight_grad``: ``gW = g.T @ x`` and, where no earlier step made it, ``gb = g.sum(0)``. GPU: ``gWᵀ = xᵀ @ g``
  with the BGRADB epilogue, whose sum over K is the bias gradient.
- ``input_grad``: ``gx = g @ W``, then, if the layer below has a mask, ``gx * bit * scale`` and its bias gradient.
  CPU: one numba pass, in place on the matmul's result, sums the bias gradient as it masks. GPU:
  ``gxᵀ = Wᵀ @ gᵀ`` with DRELU_BGRAD, the mask as the ReLU bitmask and alpha = the dropout scale (OneFlow's
  fusion: the dropout bits are folded into the ReLU bitmask and the scale into alpha).
``FusedMLP`` chains them over a stack of layers. It is one Function for the whole stack because DRELU_BGRAD fuses
layer l-1's activation backward into layer l's input-gradient matmul, across what would be a Function boundary.

Mixed precision (``FusedMLP(..., precision=)``, docs/precision.md): the parameters stay float32 (the master
weights the optimizer updates) and the MLP's input and output stay in their dtype; inside, ``fp16`` casts the
input and a float16 copy of W and b, runs every matmul with float16 operands and float32 accumulation
(cuBLASLt's COMPUTE_32F), keeps activations and gradients in float16, and casts the weight and bias gradients
back to float32. ``bf16`` keeps float32 arrays (CuPy has no bfloat16 dtype) and asks cuBLASLt for
COMPUTE_32F_FAST_16BF, whose tensor cores round the operands to bfloat16 and accumulate in float32; ``tf32``
likewise asks for COMPUTE_32F_FAST_TF32 (operands rounded to TF32's 11 significant bits). All three run on a GPU
only: the CPU path refuses them.

The GPU path (the ``*_cuda`` functions) runs nvmath-python's stateful ``Matmul`` on the device's arrays. Planning
(cuBLASLt's heuristic query, descriptors, layouts) costs more than a small matmul, so ``PLANS`` plans each
problem once and runs it again with ``reset_operands``. Its tests (marked ``gpu``) run under
``GPUEMB_DEVICE=emulated``, whose nvmath computes each epilogue and compute type to cuBLASLt's documented
semantics in NumPy; the path has NOT yet run on a GPU, so its speed and real cuBLASLt's agreement are unmeasured.
"""
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from gpuemb.autograd.backend import get_array_module, is_device_array, library
from gpuemb.autograd.function import Function

from .relu_dropout import (dropout_scale, keep_threshold, relu_dropout_backward, relu_dropout_backward_sum_cpu,
                           relu_dropout_backward_sum_cuda, relu_dropout_backward_sum_ref, relu_dropout_cpu,
                           relu_dropout_cuda, relu_dropout_ref)


# -- reference ------------------------------------------------------------------------------------------------
def linear_forward_ref(x, W, b, relu=False, p=0.0, seed=0, step=0, training=True, row0=0):
    """``(y, mask)``: ``y = x @ W.T + b``, through ReLU + dropout when relu (mask None otherwise). row0: the index of
    x's first row in the whole batch, which the dropout draws by (relu_dropout.py)."""
    z = x @ W.T + b
    return relu_dropout_ref(z, p, seed, step, training, row0=row0) if relu else (z, None)


def weight_grad_ref(g, x, with_bias=True):
    """``(gW, gb)`` of a layer from the gradient g of its pre-activation; gb is None unless with_bias."""
    return g.T @ x, g.sum(axis=0) if with_bias else None


def _input_grad(g, W, mask, scale, backward_sum):
    gx = g if W is None else g @ W  # W None: g is already the matmul's result
    if mask is None:
        return gx, None
    return backward_sum(gx, mask, scale, out=gx)  # gx is this call's own array, so the mask applies in place


def input_grad_ref(g, W, mask=None, scale=1.0):
    """``(gx, gb)``: ``gx = g @ W``, masked and scaled by the layer below's mask, whose bias gradient is gb."""
    return _input_grad(g, W, mask, scale, relu_dropout_backward_sum_ref)


# -- CPU: BLAS matmuls, numba epilogues -------------------------------------------------------------------------
def linear_forward_cpu(x, W, b, relu=False, p=0.0, seed=0, step=0, training=True, row0=0):
    z = x @ W.T
    if not relu:
        z += b
        return z, None
    return relu_dropout_cpu(z, p, seed, step, training, bias=b, out=z, row0=row0)


def weight_grad_cpu(g, x, with_bias=True):
    # gW = g.T @ x, formed as x.T @ g written through the transpose of a C-ordered gW: BLAS takes both operands
    # and the output as they lie, so nothing is copied. Forming (x.T @ g).T and copying it back to C order cost a
    # [1024, 3456] weight 63 ms at batch 512 on 2 cores, against 19 ms so (mlperf-dcnv2's first top layer).
    gb = g.sum(axis=0) if with_bias else None
    gW = np.empty((g.shape[1], x.shape[1]), np.result_type(g, x))
    np.matmul(x.T, g, out=gW.T)
    return gW, gb


def input_grad_cpu(g, W, mask=None, scale=1.0):
    if W is not None and W.shape[0] == 1:  # a layer of one output (the logit): g @ W is an outer product, which
        g, W = g * W, None                 # BLAS runs as a K=1 GEMM at a quarter of the broadcast's speed
    return _input_grad(g, W, mask, scale, relu_dropout_backward_sum_cpu)


# -- GPU: cuBLASLt epilogues through nvmath-python -----------------------------------------------------------
# precision -> (the dtype activations and the weights' copies are cast to, or None; cuBLASLt's compute type)
PRECISIONS = {"fp32": (None, None), "fp16": (np.float16, "COMPUTE_32F"), "bf16": (None, "COMPUTE_32F_FAST_16BF"),
              "tf32": (None, "COMPUTE_32F_FAST_TF32")}


def _traits(a):
    return a.dtype.str, a.shape, a.strides


class EpilogRefused(RuntimeError):
    """cuBLASLt has no kernel for this epilog on these operands (CUBLAS_STATUS_NOT_SUPPORTED when planning)."""


def _not_supported(error):
    return "NOT_SUPPORTED" in str(error)


class MatmulPlans:
    """nvmath ``Matmul`` objects, each planned once and run again with ``reset_operands``; beyond ``size`` the
    least recently used is freed. An MLP needs three per layer (forward, weight and input gradients) for each
    batch size it sees.

    cuBLASLt supports each epilog for some dtypes, layouts and sizes only, and says so only when planning (the H200
    of docs/perf/README.md refused BGRADB for some of the MLPs' problems, those whose rows were not a multiple of
    16 bytes). A refused problem raises :class:`EpilogRefused`,
    which the caller answers with a plain matmul and a kernel of its own, and is kept in ``refused`` so that it is
    never planned again."""

    def __init__(self, size=64):
        self.size, self.plans, self.refused = size, OrderedDict(), set()

    def run(self, a, b, epilog=None, epilog_inputs=None, alpha=1.0, compute=None):
        """What nvmath's ``matmul(a, b, alpha=, epilog=, epilog_inputs=)`` returns, with ``compute`` (a ComputeType
        name, or None for the default) as the options' compute type; epilog is a MatmulEpilog name or None."""
        nvmath = library("nvmath.linalg.advanced")
        inputs = epilog_inputs or {}
        # A plan is fixed to the key: the epilog and compute type are set when planning, and reset_operands takes
        # only operands and epilog inputs of the dtype, shape and strides planned. alpha (the dropout scale) is
        # reset on every call instead. The thread: a Matmul holds its operands from reset_operands to execute.
        problem = (epilog, compute, _traits(a), _traits(b),
                   *((name, *_traits(x)) for name, x in sorted(inputs.items())))
        if problem in self.refused:
            raise EpilogRefused(f"cuBLASLt refused the epilog {epilog} for {problem[2:]}")
        key = (threading.get_ident(), *problem)
        mm = self.plans.pop(key, None)
        if mm is None:
            compute_type = None if compute is None else getattr(nvmath.MatmulComputeType, compute)
            mm = nvmath.Matmul(a, b, alpha=alpha, options=nvmath.MatmulOptions(compute_type=compute_type))
            try:
                mm.plan(epilog=None if epilog is None else getattr(nvmath.MatmulEpilog, epilog),
                        epilog_inputs=epilog_inputs)
            except Exception as e:
                mm.free()
                if epilog is None or not _not_supported(e):
                    raise
                self.refused.add(problem)
                raise EpilogRefused(f"cuBLASLt refused the epilog {epilog} for {problem[2:]}: {e}") from e
        else:
            mm.reset_operands(a=a, b=b, alpha=alpha, epilog_inputs=epilog_inputs)
        self.plans[key] = mm
        if len(self.plans) > self.size:
            self.plans.popitem(last=False)[1].free()
        try:
            return mm.execute()
        finally:
            mm.release_operands()  # drops this call's operands, whose memory the plan would otherwise keep alive


PLANS = MatmulPlans()


def cublaslt_mask_words(cols):
    """Words per mask row in cuBLASLt's ReLU bitmask: its leading dimension is a multiple of 128 bits."""
    return 4 * ((cols + 127) // 128)


def _aux_to_mask(aux):
    # relu_aux is uint8 [16 * ceil(M / 128), B] column-major: row b of its transpose is sample b's bits.
    return aux.T.view(np.uint32)


def _mask_to_aux(mask):
    return mask.view(np.uint8).T


# An empty batch (a rank's share of a short last batch) computes nothing, and nvmath refuses empty extents, so
# each step below returns its empty or zero result itself.
def linear_forward_cuda(x, W, b, relu=False, p=0.0, seed=0, step=0, training=True, compute=None, row0=0):
    xp = get_array_module(x)
    if not x.shape[0]:
        mask = xp.empty((0, cublaslt_mask_words(W.shape[0])), dtype=np.uint32) if relu else None
        return xp.empty((0, W.shape[0]), dtype=x.dtype), mask
    if not relu:
        return xp.ascontiguousarray(PLANS.run(W, x.T, "BIAS", {"bias": b}, compute=compute).T), None
    if keep_threshold(p if training else 0.0):
        y = xp.ascontiguousarray(PLANS.run(W, x.T, "RELU_BIAS", {"bias": b}, compute=compute).T)
        return relu_dropout_cuda(y, p, seed, step, training, out=y, words_per_row=cublaslt_mask_words(W.shape[0]),
                                 row0=row0)
    yT, aux = PLANS.run(W, x.T, "RELU_AUX_BIAS", {"bias": b}, compute=compute)
    return xp.ascontiguousarray(yT.T), _aux_to_mask(aux["relu_aux"])


def weight_grad_cuda(g, x, with_bias=True, compute=None):
    xp = get_array_module(g)
    if not g.shape[0]:
        gb = xp.zeros(g.shape[1], dtype=g.dtype) if with_bias else None
        return xp.zeros((g.shape[1], x.shape[1]), dtype=g.dtype), gb
    if not with_bias:
        return (g.T @ x if compute is None else xp.ascontiguousarray(PLANS.run(x.T, g, compute=compute).T)), None
    try:
        gWT, aux = PLANS.run(x.T, g, "BGRADB", compute=compute)
    except EpilogRefused:  # the sum over the batch as a reduction of its own
        return xp.ascontiguousarray(PLANS.run(x.T, g, compute=compute).T), g.sum(axis=0)
    return xp.ascontiguousarray(gWT.T), aux["bgradb"]


def input_grad_cuda(g, W, mask=None, scale=1.0, compute=None):
    xp = get_array_module(g)
    if not g.shape[0]:
        return xp.empty((0, W.shape[1]), dtype=g.dtype), None if mask is None else xp.zeros(W.shape[1], g.dtype)
    if mask is None or W.shape[0] == 1:  # cuBLASLt's DRELU epilogues refuse K = 1
        gx = g @ W if compute is None else xp.ascontiguousarray(PLANS.run(W.T, g.T, compute=compute).T)
        return _input_grad(gx, None, mask, scale, relu_dropout_backward_sum_cuda)
    if mask.shape[1] != cublaslt_mask_words(W.shape[1]):
        raise ValueError(f"input_grad_cuda: a mask of {mask.shape[1]} words per row is not cuBLASLt's layout "
                         f"for {W.shape[1]} columns ({cublaslt_mask_words(W.shape[1])} words)")
    try:
        gxT, aux = PLANS.run(W.T, g.T, "DRELU_BGRAD", {"relu_aux": _mask_to_aux(mask)}, alpha=scale, compute=compute)
    except EpilogRefused:  # the mask, the scale and the bias gradient in one kernel after a plain matmul
        gx = xp.ascontiguousarray(PLANS.run(W.T, g.T, compute=compute).T)
        return _input_grad(gx, None, mask, scale, relu_dropout_backward_sum_cuda)
    return xp.ascontiguousarray(gxT.T), aux["drelu_bgrad"]


# -- dispatchers ------------------------------------------------------------------------------------------------
def _on_gpu(a, compute, op):
    """Whether ``a`` takes the GPU path; a cuBLASLt compute type on a NumPy array is refused."""
    if is_device_array(a):
        return True
    if compute is not None:
        raise ValueError(f"{op}: compute type {compute} (reduced precision) runs on a GPU only; the CPU path "
                         "computes in the arrays' dtype, so use precision='fp32' there")
    return False


def linear_forward(x, W, b, relu=False, p=0.0, seed=0, step=0, training=True, compute=None, row0=0):
    """``(y, mask)`` of one fused layer ``act(x @ W.T + b)``: cuBLASLt epilogues on CuPy, BLAS + numba on NumPy.

    compute: a cuBLASLt compute type name for the GPU's matmul (``PRECISIONS``), None for its default. row0: the
    index of x's first row in the whole batch, which the dropout draws by."""
    if x.ndim != 2 or W.ndim != 2 or x.shape[1] != W.shape[1] or b.shape != (W.shape[0],):
        raise ValueError(f"linear_forward: want x [B, in], W [out, in], b [out]; got {x.shape}, {W.shape}, {b.shape}")
    if _on_gpu(x, compute, "linear_forward"):
        return linear_forward_cuda(x, W, b, relu, p, seed, step, training, compute, row0=row0)
    return linear_forward_cpu(x, W, b, relu, p, seed, step, training, row0)


def weight_grad(g, x, with_bias=True, compute=None):
    """``(gW, gb)`` from the pre-activation gradient g ``[B, out]`` and the layer input x ``[B, in]``."""
    if _on_gpu(g, compute, "weight_grad"):
        return weight_grad_cuda(g, x, with_bias, compute)
    return weight_grad_cpu(g, x, with_bias)


def input_grad(g, W, mask=None, scale=1.0, compute=None):
    """``(gx, gb)``: the gradient through W, then through the mask and scale of the layer below, if any."""
    if _on_gpu(g, compute, "input_grad"):
        return input_grad_cuda(g, W, mask, scale, compute)
    return input_grad_cpu(g, W, mask, scale)


# -- autograd ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FusedLayer:
    """What follows one layer's matmul: ReLU or nothing, dropout probability p (after the ReLU), Philox seed."""

    relu: bool = False
    p: float = 0.0
    seed: int = 0

    def validate(self):
        if self.p and not self.relu:
            raise ValueError(f"FusedLayer: dropout p={self.p} needs relu=True; the fused layer drops after a ReLU")
        keep_threshold(self.p)
        return self


class FusedMLP(Function):
    """A stack of fused layers: ``apply(x, W1, b1, ..., WL, bL)`` runs ``linear_forward`` layer after layer.

    layers: one FusedLayer per (W, b) pair. step: the dropout step counter. training: False turns dropout off.
    precision: "fp32", or "fp16"/"bf16" on a GPU (see the module docstring): the input, output, parameters and
    their gradients keep their dtypes; only the compute inside is reduced. row0: the index of x's first row in
    the whole batch (a rank's slice of it), which the dropout draws by.
    """

    def __init__(self, layers, step=0, training=True, precision="fp32", row0=0):
        if precision not in PRECISIONS:
            raise ValueError(f"FusedMLP: precision={precision!r}; use one of {', '.join(PRECISIONS)}")
        self.layers = tuple(layer.validate() for layer in layers)
        self.step, self.training, self.row0 = step, training, row0
        self.cast, self.compute = PRECISIONS[precision]

    def _in(self, a):
        """``a`` in the compute dtype (a copy only where it changes)."""
        return a if self.cast is None else a.astype(self.cast, copy=False)

    def forward(self, x, *params):
        if len(params) != 2 * len(self.layers):
            raise ValueError(f"FusedMLP: {len(self.layers)} layers need {2 * len(self.layers)} weights and biases, "
                             f"got {len(params)}")
        mixed = sorted({str(a.dtype) for a in (x, *params)} - {str(x.dtype)})
        if self.cast is None and mixed:  # BLAS would upcast every matmul, silently (float64: half the speed)
            raise ValueError(f"FusedMLP: the input is {x.dtype} but some weights or biases are {', '.join(mixed)}; "
                             f"give them all one dtype (float32 parameters, float32 input)")
        self.dtypes = [a.dtype for a in (x, *params)]  # what each gradient is cast back to
        params = [self._in(a) for a in params]  # float16 copies of the float32 master weights, made each step
        self.weights, self.layer_inputs, self.masks = params[0::2], [], []
        y = get_array_module(x).ascontiguousarray(self._in(x))  # cuBLASLt wants a unit stride
        for layer, W, b in zip(self.layers, self.weights, params[1::2]):
            self.layer_inputs.append(y)
            y, mask = linear_forward(y, W, b, layer.relu, layer.p, layer.seed, self.step, self.training,
                                     self.compute, self.row0)
            self.masks.append(mask)
        return y.astype(x.dtype, copy=False)

    def _scale(self, i):
        return dropout_scale(self.layers[i].p, self.training)

    def backward(self, gy):
        gy = get_array_module(gy).ascontiguousarray(self._in(gy))  # cuBLASLt wants a unit stride
        n, c = len(self.layers), self.compute
        # gb: the bias gradient of the current layer, where a mask's backward made it in its pass (the CPU, and
        # input_grad of the layer above); None leaves it to weight_grad, which on a GPU is cuBLASLt's BGRADB epilogue
        g, gb, last = gy, None, self.masks[-1]
        if last is not None and is_device_array(gy):
            g = relu_dropout_backward(gy, last, self._scale(n - 1))
        elif last is not None:
            g, gb = relu_dropout_backward_sum_cpu(gy, last, self._scale(n - 1))
        grads = [None] * (2 * n)
        for i in reversed(range(n)):
            gW, gb_here = weight_grad(g, self.layer_inputs[i], gb is None, c)
            grads[2 * i], grads[2 * i + 1] = gW, gb_here if gb is None else gb
            if i:
                g, gb = input_grad(g, self.weights[i], self.masks[i - 1], self._scale(i - 1), c)
        gx = input_grad(g, self.weights[0], compute=c)[0] if self.needs_input_grad[0] else None
        return tuple(None if g is None else g.astype(dtype, copy=False) for g, dtype in zip((gx, *grads), self.dtypes))


def fused_linear(x, W, b, relu=False, p=0.0, seed=0, step=0, training=True, precision="fp32"):
    """One fused layer ``act(x @ W.T + b)`` on Tensors: a FusedMLP of one layer."""
    return FusedMLP([FusedLayer(relu, p, seed)], step, training, precision).apply(x, W, b)
