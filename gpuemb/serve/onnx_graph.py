"""GraphBuilder: the few calls the layer emitters need to write an ONNX graph: constants, nodes, fresh names."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class GraphBuilder:
    """Nodes in the order they are added (which is topological: an emitter adds a node after its inputs)."""

    def __init__(self):
        self.nodes, self.initializers, self.count = [], [], 0

    def fresh(self, hint):
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, value, hint="c"):
        """The name of a new initializer holding ``value`` (float arrays as float32, integer ones as int64)."""
        value = np.asarray(value)
        value = value.astype(np.int64 if value.dtype.kind in "iu" else np.float32)
        name = self.fresh(hint)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, op_type, *inputs, **attrs):
        """The name of the (single) output of a new ``op_type`` node over ``inputs``."""
        out = self.fresh(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def reshape(self, x, shape):
        return self.op("Reshape", x, self.const(np.array(shape, np.int64), "shape"))

    def reduce_sum(self, x, axes, keepdims):
        return self.op("ReduceSum", x, self.const(np.array(axes, np.int64), "axes"), keepdims=int(keepdims))

    def rename(self, x, name):
        """Give the value ``x`` the graph-level name ``name`` (an output's), wherever it is made or read."""
        for node in self.nodes:
            for field in (node.input, node.output):
                for i, v in enumerate(field):
                    if v == x:
                        field[i] = name
        return name

    def build(self, inputs, outputs, name):
        """The checked model: ``inputs`` and ``outputs`` are ``(name, shape)`` pairs, float32, "B" the batch."""
        def info(n, shape):
            return helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shape))
        graph = helper.make_graph(self.nodes, name, [info(*i) for i in inputs], [info(*o) for o in outputs],
                                  self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="gpuemb")
        model.ir_version = min(model.ir_version, 8)  # opset 17's IR, which older runtimes read too
        onnx.checker.check_model(model, full_check=True)
        return model
