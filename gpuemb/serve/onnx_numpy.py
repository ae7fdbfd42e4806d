"""A NumPy interpreter of the ONNX ops the exporter emits, so a bundle runs with NumPy alone and its ONNX file
stays the one description of the dense part. An op outside ``OPS`` is refused by name: the exporter and this list
change together (docs/serve.md lists them)."""
import numpy as np
from onnx import helper, numpy_helper

from .errors import BundleError


def _gemm(a, b, c=None, alpha=1.0, beta=1.0, transA=0, transB=0):
    y = alpha * ((a.T if transA else a) @ (b.T if transB else b))
    return y if c is None else y + beta * c


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _reshape(x, shape, allowzero=0):
    shape = [x.shape[i] if s == 0 and not allowzero else int(s) for i, s in enumerate(shape)]
    return x.reshape(shape)


def _reduce_sum(x, axes=None, keepdims=1, noop_with_empty_axes=0):
    if axes is None or not len(axes):
        return x if noop_with_empty_axes else x.sum(keepdims=bool(keepdims))
    return x.sum(axis=tuple(int(a) for a in axes), keepdims=bool(keepdims))


OPS = {
    "Gemm": _gemm,
    "MatMul": np.matmul,
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Relu": lambda x: np.maximum(x, 0).astype(x.dtype),
    "Sigmoid": lambda x: (1.0 / (1.0 + np.exp(-x))).astype(x.dtype),
    "Softmax": _softmax,
    "Reshape": _reshape,
    "Concat": lambda *xs, axis: np.concatenate(xs, axis=axis),
    "ReduceSum": _reduce_sum,
    "Transpose": lambda x, perm=None: np.transpose(x, perm),
    "Gather": lambda x, idx, axis=0: np.take(x, idx, axis=axis),
}


def _attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


class NumpyGraph:
    """``run(feed)``: the graph of ``model`` (an ``onnx.ModelProto``) on ``{input name: array}``, as a list of
    its outputs."""

    def __init__(self, model):
        graph = model.graph
        unknown = sorted({n.op_type for n in graph.node} - OPS.keys())
        if unknown:
            raise BundleError(f"the ONNX graph uses ops {unknown} that the NumPy runtime does not run (it runs "
                              f"{', '.join(OPS)}); export the bundle with this gpuemb, or use runtime='onnxruntime'")
        self.nodes = [(n.op_type, list(n.input), list(n.output), _attrs(n)) for n in graph.node]
        self.constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self.outputs = [o.name for o in graph.output]

    def run(self, feed):
        values = {**self.constants, **feed}
        for op, inputs, outputs, attrs in self.nodes:
            args = [values[name] if name else None for name in inputs]
            values[outputs[0]] = OPS[op](*args, **attrs)
        return [values[name] for name in self.outputs]
