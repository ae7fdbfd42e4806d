"""``nvmath.linalg.advanced`` of the emulated device (and ``nvmath.linalg``'s ComputeType): cuBLASLt's matmul
``D = epilog(alpha * A @ B + beta * C)`` with the epilogues the project uses, in NumPy, on device arrays.

It keeps what the project's code can get wrong against nvmath-python 1.x:
- the calls: ``matmul`` and the stateful ``Matmul`` (``plan``, ``reset_operands`` by keyword only, ``release_operands``,
  ``execute``, ``free``, with), with nvmath-python 1.0's signatures (tests/autograd/emulated/test_nvmath_api.py);
- the layouts: an operand needs a unit stride along one of its two dimensions (row- or column-major, padded or
  not); the result is column-major when the epilog needs it (every one below but RELU and BGRADA), else laid out
  as A is;
- the epilogues: BIAS (``bias`` [M], added after alpha), RELU, RELU_BIAS, RELU_AUX and RELU_AUX_BIAS (the
  ``relu_aux`` bitmask: uint8 ``[16 * ceil(M / 128), N]``, column-major, bit ``m % 8`` of byte ``m // 8`` of
  column n set where the pre-activation is positive), DRELU and DRELU_BGRAD (that bitmask as input; the bias
  gradient ``drelu_bgrad`` [M] sums D along N), BGRADA and BGRADB (``bgrada`` [M] sums A along K, ``bgradb`` [N]
  sums B along K);
- the arithmetic: float16 operands under COMPUTE_32F multiply and accumulate in float32, epilogue included, and
  D is rounded to float16 once; COMPUTE_32F_FAST_16BF, FAST_TF32 and FAST_16F round float32 operands to bfloat16,
  TF32 or float16 (to nearest even) and accumulate in float32; float64 runs COMPUTE_64F;
- what nvmath refuses: mixed operand dtypes, a compute type the dtypes do not take, empty extents, mismatched K,
  epilog inputs missing or of the wrong name, shape, stride or dtype, DRELU with K = 1, operands reset with
  another dtype, shape or strides, a Matmul used before ``plan`` or after ``free``.

It is stricter in three places, each a silent hazard on a GPU: a host (NumPy) operand is refused (nvmath would
copy it across and back, unseen); a ``relu_aux`` input whose columns are not ``16 * ceil(M / 128)`` bytes apart
is refused (nvmath hands cuBLASLt that leading dimension whatever the strides, so it would read other bits); and
the padding bits of a ``relu_aux`` output are set (cuBLASLt does not promise them), so code that counts on them
fails here. Whether the BGRAD sums read the operands before or after FAST_16BF's rounding is not documented; here
they read them as the matmul does, rounded.

Each ``plan`` and each ``execute`` counts one call into cuBLASLt (``launches.cublaslt``): a plan queries its
heuristics, an execute launches the matmul.

Batched operands: A and B of ``[batch, M, K]`` and ``[batch, K, N]`` (both 3-D, one batch size), each matrix laid
out as above, with no C and no epilog; D is ``[batch, M, N]``, each matrix laid out as A's are.

Left out, with NotImplementedError: vectors, batches beside a 2-D operand, batched epilogs, operand C in place,
the GELU epilogues, qualifiers, narrow precision, options that change the result type.
"""
import dataclasses
import enum
import logging
from typing import NamedTuple

import numpy as np

from .. import launches
from .array import ndarray, wrap


class ComputeType(enum.IntEnum):
    """cuBLAS's ``cublasComputeType_t``."""

    COMPUTE_16F = 64
    COMPUTE_16F_PEDANTIC = 65
    COMPUTE_32F = 68
    COMPUTE_32F_PEDANTIC = 69
    COMPUTE_32F_FAST_16F = 74
    COMPUTE_32F_FAST_16BF = 75
    COMPUTE_32F_FAST_TF32 = 77
    COMPUTE_64F = 70
    COMPUTE_64F_PEDANTIC = 71
    COMPUTE_32I = 72
    COMPUTE_32I_PEDANTIC = 73


MatmulComputeType = ComputeType


class MatmulEpilog(enum.IntEnum):
    """cuBLASLt's ``cublasLtEpilogue_t``."""

    DEFAULT = 1
    RELU = 2
    RELU_AUX = 130
    BIAS = 4
    RELU_BIAS = 6
    RELU_AUX_BIAS = 134
    DRELU = 136
    DRELU_BGRAD = 152
    GELU = 32
    GELU_AUX = 160
    GELU_BIAS = 36
    GELU_AUX_BIAS = 164
    DGELU = 192
    DGELU_BGRAD = 208
    BGRADA = 256
    BGRADB = 512


class InvalidMatmulState(Exception):
    pass


@dataclasses.dataclass
class MatmulOptions:
    """nvmath's options; those that change no value here are taken and ignored."""

    inplace: bool = False
    compute_type: int | None = None
    scale_type: int | None = None
    result_type: int | None = None
    result_amax: bool = False
    block_scaling: bool = False
    sm_count_target: int | None = 0
    fast_accumulation: bool | None = False
    device_id: int = 0
    handle: int | None = None
    logger: logging.Logger | None = None
    memory_limit: int | str | None = "80%"
    blocking: object = "auto"
    allocator: object = None

    def __post_init__(self):
        if self.compute_type is not None:
            self.compute_type = ComputeType(self.compute_type)
        if self.blocking not in (True, "auto"):
            raise ValueError("MatmulOptions: blocking must be True or 'auto'")
        for name in ("inplace", "scale_type", "result_type", "result_amax", "block_scaling"):
            if getattr(self, name) not in (None, False):
                raise NotImplementedError(f"the emulated nvmath does not model MatmulOptions.{name}")


class Algorithm:
    """What ``plan`` returns a sequence of; the emulation has one algorithm."""

    algorithm_id = 0


class Steps(NamedTuple):
    """What an epilog does after ``alpha * a @ b + beta * c``, in this order."""

    inputs: tuple = ()
    bias: bool = False  # add the bias input along M
    writes_mask: bool = False  # return the ReLU bitmask of the sum as relu_aux
    relu: bool = False
    reads_mask: bool = False  # zero where the relu_aux input's bit is clear
    bias_grad: str = ""  # the name of the bias gradient it returns


_E = MatmulEpilog
EPILOGS = {
    _E.BIAS: Steps(("bias",), bias=True),
    _E.RELU: Steps(relu=True),
    _E.RELU_BIAS: Steps(("bias",), bias=True, relu=True),
    _E.RELU_AUX: Steps(writes_mask=True, relu=True),
    _E.RELU_AUX_BIAS: Steps(("bias",), bias=True, writes_mask=True, relu=True),
    _E.DRELU: Steps(("relu_aux",), reads_mask=True),
    _E.DRELU_BGRAD: Steps(("relu_aux",), reads_mask=True, bias_grad="drelu_bgrad"),
    _E.BGRADA: Steps(bias_grad="bgrada"),
    _E.BGRADB: Steps(bias_grad="bgradb"),
}
ROW_ORDER_ALLOWED = (_E.RELU, _E.BGRADA)  # the others make the result column-major

def bfloat16(x):
    """float32 values rounded to bfloat16 (8 significant bits, to nearest even), kept in float32."""
    return _round_mantissa(x, 16)


def tfloat32(x):
    """float32 values rounded to TF32 (11 significant bits, to nearest even), kept in float32: what the tensor cores
    read of a float32 operand under COMPUTE_32F_FAST_TF32."""
    return _round_mantissa(x, 13)


def half(x):
    """float32 values rounded to float16 and back (11 significant bits; beyond 65504, inf): FAST_16F's operands."""
    with np.errstate(over="ignore"):
        return x.astype(np.float16).astype(np.float32)


def _round_mantissa(x, dropped):
    """float32 values with their low ``dropped`` mantissa bits rounded away, to nearest even; NaN kept."""
    bits = x.view(np.uint32)
    half_ulp, keep = np.uint32((1 << (dropped - 1)) - 1), np.uint32((0xFFFFFFFF >> dropped) << dropped)
    rounded = (bits + half_ulp + ((bits >> np.uint32(dropped)) & np.uint32(1))) & keep
    return np.where(np.isnan(x), x, rounded.view(np.float32))


# compute type -> (the operand dtypes it takes, the dtype it multiplies and accumulates in, how float32 operands are
# first rounded, or None); the default for each operand dtype is the first that takes it
COMPUTE = {
    ComputeType.COMPUTE_32F: (("float16", "float32"), np.float32, None),
    ComputeType.COMPUTE_32F_FAST_16BF: (("float32",), np.float32, bfloat16),
    ComputeType.COMPUTE_32F_FAST_TF32: (("float32",), np.float32, tfloat32),
    ComputeType.COMPUTE_32F_FAST_16F: (("float32",), np.float32, half),
    ComputeType.COMPUTE_64F: (("float64",), np.float64, None),
}


def relu_aux_rows(m):
    """Bytes per column of the ReLU bitmask: one bit per row, padded to a multiple of 128 bits."""
    return 16 * ((m + 127) // 128)


def pack_relu_aux(bits):
    """The bool ``[M, N]`` ``bits`` as cuBLASLt's bitmask, padding bits set."""
    m, n = bits.shape
    padded = np.ones((8 * relu_aux_rows(m), n), dtype=bool)
    padded[:m] = bits
    return np.asfortranarray(np.packbits(padded, axis=0, bitorder="little"))


def unpack_relu_aux(aux, m):
    return np.unpackbits(aux, axis=0, bitorder="little")[:m].astype(bool)


def _device(x, name):
    """The NumPy array behind a device operand; host arrays are refused (nvmath would copy them across, unseen)."""
    if isinstance(x, ndarray):
        return x._a
    if isinstance(x, np.ndarray):
        raise TypeError(f"nvmath: operand {name} is a host array (shape {x.shape}); nvmath would copy it to the GPU "
                        f"and the result back, unseen. Copy it across with backend.to_device first")
    raise TypeError(f"nvmath: operand {name} of type {type(x).__name__} is not a supported tensor")


def _order(a, name):
    """'COL' or 'ROW': how cuBLASLt reads a matrix (each matrix of a batch), which needs a unit stride along one of
    its dimensions (a single row or column may have any)."""
    s0, s1 = (s // a.itemsize for s in a.strides[-2:])
    rows, cols = a.shape[-2:]
    if s0 == 1:
        return "COL"
    if s1 == 1:
        return "ROW"
    if rows == 1:
        return "COL"
    if cols == 1:
        return "ROW"
    raise ValueError(f"nvmath: unsupported layout of operand {name}: shape {a.shape}, strides {a.strides}; a matrix "
                     f"needs a unit stride along one dimension")


def _traits(a):
    return a.dtype, a.shape, a.strides


class Matmul:
    """A planned ``D = epilog(alpha * a @ b + beta * c)``, run by ``execute`` on the operands of the last
    ``reset_operands``."""

    def __init__(self, a, b, /, c=None, *, alpha=None, beta=None, qualifiers=None, quantization_scales=None,
                 options=None, stream=None):
        if isinstance(options, dict):
            options = MatmulOptions(**options)
        options = MatmulOptions() if options is None else options
        if not isinstance(options, MatmulOptions):
            raise TypeError(f"nvmath: options must be a MatmulOptions or a dict, not {type(options).__name__}")
        if qualifiers is not None or quantization_scales is not None:
            raise NotImplementedError("the emulated nvmath does not model qualifiers or quantization scales")
        operands = [_device(a, "A"), _device(b, "B")] + ([] if c is None else [_device(c, "C")])
        for x, name in zip(operands, "ABC"):
            if x.dtype.name not in ("float16", "float32", "float64"):
                raise ValueError(f"nvmath: the dtype of operand {name} ({x.dtype}) is not supported here (float16, "
                                 "float32, float64)")
            if x.ndim not in (2, 3):
                raise NotImplementedError(f"the emulated nvmath takes matrices and batches of them only; operand "
                                          f"{name} is {x.shape}")
            if 0 in x.shape:
                raise ValueError(f"nvmath: the extents {x.shape} of operand {name} must be strictly positive")
            _order(x, name)
        a, b = operands[:2]
        if a.dtype != b.dtype:
            raise ValueError(f"nvmath: unsupported combination of dtypes for operands A {a.dtype} and B {b.dtype}")
        if a.shape[-1] != b.shape[-2]:
            raise ValueError(f"nvmath: K={a.shape[-1]} in operand A is not K={b.shape[-2]} in operand B")
        self.batch = a.shape[:-2] if a.ndim == 3 else b.shape[:-2]
        if (a.ndim == 3 or b.ndim == 3) and (a.shape[:-2] != b.shape[:-2] or c is not None):
            raise NotImplementedError(f"the emulated nvmath takes batches of one size in both A and B, with no C; got "
                                      f"A {a.shape} and B {b.shape}")
        self.M, self.K, self.N = a.shape[-2], a.shape[-1], b.shape[-1]
        if c is not None:
            if beta is None:
                raise ValueError("nvmath: operand C needs a value for beta")
            if operands[2].shape not in ((self.M, self.N), (self.M, 1)):
                raise ValueError(f"nvmath: operand C of shape {operands[2].shape} for a [{self.M}, {self.N}] result")
        self.compute_type = options.compute_type
        if self.compute_type is None:
            self.compute_type = next(t for t, (dtypes, _, _) in COMPUTE.items() if a.dtype.name in dtypes)
        if self.compute_type not in COMPUTE:
            raise NotImplementedError(f"the emulated nvmath does not model {self.compute_type!r}")
        dtypes, self.accumulate, self.rounding = COMPUTE[self.compute_type]
        if a.dtype.name not in dtypes:
            raise ValueError(f"nvmath: {self.compute_type!r} is not supported for data types {a.dtype} (A) and "
                             f"{b.dtype} (B)")
        self.alpha = np.array([1 if alpha is None else alpha], dtype=self.accumulate)
        self.beta = np.array([beta if c is not None else 0], dtype=self.accumulate)
        self.d_dtype = (a if c is None else operands[2]).dtype
        self.operands, self.operand_traits = operands, [_traits(x) for x in operands]
        self.epilog, self.epilog_operands, self.epilog_traits = None, {}, {}
        self.planned, self.valid = False, True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def _check_valid(self):
        if not self.valid:
            raise InvalidMatmulState("The Matmul object cannot be used after its resources are freed")

    def plan(self, *, preferences=None, algorithms=None, epilog=None, epilog_inputs=None, stream=None):
        """Fix the epilog and its inputs; returns the algorithms (one here)."""
        self._check_valid()
        self.epilog, self.epilog_operands, self.epilog_traits = None, {}, {}
        if epilog is not None:
            epilog = MatmulEpilog(epilog)
            if self.batch:
                raise NotImplementedError("the emulated nvmath does not model epilogs on batched operands")
            if epilog not in EPILOGS:
                raise NotImplementedError(f"the emulated nvmath does not model the epilog {epilog.name}")
            needs = set(EPILOGS[epilog].inputs)
            given = dict(epilog_inputs or {})
            if set(given) != needs:
                raise ValueError(f"nvmath: the epilog {epilog.name} requires the input tensors {sorted(needs)}; "
                                 f"got {sorted(given)}")
            if epilog in (_E.DRELU, _E.DRELU_BGRAD) and self.K == 1:
                raise ValueError("nvmath: K=1 is not supported for DRELU epilogs")
            if epilog in (_E.BGRADA, _E.BGRADB) and len(self.operands) == 3 and _order(self.operands[2], "C") == "ROW":
                raise ValueError(f"nvmath: the epilog {epilog.name} requires operand C to be column-major")
            for name, x in given.items():
                x = _device(x, name)
                (self._check_bias if name == "bias" else self._check_relu_aux)(x, epilog)
                self.epilog_operands[name], self.epilog_traits[name] = x, _traits(x)
            self.epilog = epilog
        self.planned = True
        launches.cublaslt()
        return (Algorithm(),)

    def _check_bias(self, bias, epilog):
        if bias.ndim not in (1, 2) or bias.shape[0] != self.M or bias.shape[1:] not in ((), (1,)):
            raise ValueError(f"nvmath: the bias for {epilog.name} must have shape ({self.M},) or ({self.M}, 1), "
                             f"the M dimension of A; got {bias.shape}")
        if bias.strides[0] != bias.itemsize:
            raise ValueError(f"nvmath: the bias (strides {bias.strides}) must have a unit stride along M")
        if bias.dtype != self.d_dtype:
            raise ValueError(f"nvmath: a bias of dtype {bias.dtype} for a {self.d_dtype} result; the emulation "
                             "models a bias of the result's dtype only")

    def _check_relu_aux(self, aux, epilog):
        want = (relu_aux_rows(self.M), self.N)
        if aux.dtype != np.uint8:
            raise ValueError(f"nvmath: the relu_aux input of {epilog.name} must be uint8, not {aux.dtype}")
        if aux.shape != want:
            raise ValueError(f"nvmath: the relu_aux input of {epilog.name} must have shape {want}; got {aux.shape}")
        if aux.strides != (1, want[0]):
            raise ValueError(f"nvmath: the relu_aux input of {epilog.name} (strides {aux.strides}) must be "
                             f"column-major with columns {want[0]} bytes apart, the leading dimension nvmath "
                             "gives cuBLASLt; with any other it would read other bits")

    def reset_operands(self, *, a=None, b=None, c=None, alpha=None, beta=None, quantization_scales=None,
                       epilog_inputs=None, stream=None):
        """New operands of the planned dtypes, shapes and strides, by keyword (nvmath 0.9 made them keyword-only);
        at least one is needed, and after ``release_operands`` all of them."""
        self._check_valid()
        if c is not None and len(self.operand_traits) == 2:
            raise ValueError("nvmath: the problem has no operand C to reset")
        if self.operands is None:
            if a is None or b is None or (c is None and len(self.operand_traits) == 3) or (
                    self.epilog_traits and epilog_inputs is None):
                raise ValueError("nvmath: after release_operands(), all required operands must be provided to "
                                 "reset_operands()")
            if set(epilog_inputs or {}) != set(self.epilog_traits):
                raise ValueError(f"nvmath: the epilog inputs {sorted(self.epilog_traits)} are required")
            self.operands = [None] * len(self.operand_traits)
        elif all(v is None for v in (a, b, c, alpha, beta, quantization_scales, epilog_inputs)):
            raise ValueError("nvmath: reset_operands() requires at least one operand to be provided")
        if alpha is not None:
            self.alpha[0] = alpha
        if beta is not None and len(self.operand_traits) == 3:
            self.beta[0] = beta
        for i, (x, name) in enumerate(zip((a, b, c), "ABC")):
            if x is not None:
                self.operands[i] = self._same(_device(x, name), self.operand_traits[i], name)
        for name, x in (epilog_inputs or {}).items():
            if name not in self.epilog_traits:
                raise ValueError(f"nvmath: {name!r} is not an input of the planned epilog")
            self.epilog_operands[name] = self._same(_device(x, name), self.epilog_traits[name], name)

    def release_operands(self):
        """Drop the operands, so that the plan keeps no memory alive between calls."""
        self.operands, self.epilog_operands = None, {}

    @staticmethod
    def _same(x, traits, name):
        for what, got, want in zip(("data type", "extents", "strides"), _traits(x), traits):
            if got != want:
                raise ValueError(f"nvmath: the {what} of the new operand {name} ({got}) must match the original "
                                 f"operand's ({want})")
        return x

    def execute(self, *, algorithm=None, release_workspace=False, stream=None):
        """The result D, and a dict of the epilog's outputs where it has any: ``(D, aux)``."""
        self._check_valid()
        if not self.planned:
            raise RuntimeError("nvmath: execution cannot be performed before plan() has been called")
        if self.operands is None:
            raise RuntimeError("nvmath: execution cannot be performed after release_operands(); provide the "
                               "operands with reset_operands()")
        launches.cublaslt()
        a, b = (x.astype(self.accumulate) for x in self.operands[:2])
        if self.rounding is not None:
            a, b = self.rounding(a), self.rounding(b)
        z = self.alpha[0] * (a @ b)
        if len(self.operands) == 3:
            z += self.beta[0] * self.operands[2].astype(self.accumulate)
        aux = {}
        if self.epilog is not None:
            z = self._epilog(EPILOGS[self.epilog], z, a, b, aux)
        if self._result_order() == "COL":  # each matrix column-major: the batch's transpose, made C-ordered
            d = np.empty((*self.batch, self.N, self.M), dtype=self.d_dtype).swapaxes(-1, -2)
        else:
            d = np.empty((*self.batch, self.M, self.N), dtype=self.d_dtype)
        d[...] = z
        return (wrap(d), {k: wrap(v) for k, v in aux.items()}) if aux else wrap(d)

    def _epilog(self, steps, z, a, b, aux):
        """The epilog's steps on the sum z (in the accumulation dtype); its outputs go into aux."""
        if steps.bias:
            z = z + self.epilog_operands["bias"].reshape(self.M, 1).astype(self.accumulate)
        if steps.writes_mask:
            aux["relu_aux"] = pack_relu_aux(z > 0)
        if steps.relu:
            z = np.maximum(z, 0)
        if steps.reads_mask:
            z = np.where(unpack_relu_aux(self.epilog_operands["relu_aux"], self.M), z, 0)
        if steps.bias_grad:
            # D's rows summed along N; A's rows, or B's columns, along K
            summed, axis = {"drelu_bgrad": (z, 1), "bgrada": (a, 1), "bgradb": (b, 0)}[steps.bias_grad]
            aux[steps.bias_grad] = summed.sum(axis=axis).astype(self.d_dtype)
        return z

    def _result_order(self):
        """C's order where there is a C, else column-major where the epilog needs it, else A's order."""
        if len(self.operands) == 3:
            return _order(self.operands[2], "C")
        if self.epilog is not None and self.epilog not in ROW_ORDER_ALLOWED:
            return "COL"
        return _order(self.operands[0], "A")

    def free(self):
        self.valid, self.operands, self.epilog_operands = False, None, {}


def matmul(a, b, /, c=None, *, alpha=None, beta=None, epilog=None, epilog_inputs=None, qualifiers=None,
           quantization_scales=None, options=None, preferences=None, algorithm=None, stream=None):
    """``epilog(alpha * a @ b + beta * c)`` planned and run once: a ``Matmul`` used for one call."""
    with Matmul(a, b, c, alpha=alpha, beta=beta, qualifiers=qualifiers, quantization_scales=quantization_scales,
                options=options, stream=stream) as mm:
        mm.plan(preferences=preferences, epilog=epilog, epilog_inputs=epilog_inputs, stream=stream)
        return mm.execute(stream=stream)
