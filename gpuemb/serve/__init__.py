"""gpuemb.serve: inference bundles. ``tools/export.py`` writes one from a checkpoint (the dense part as ONNX, the
tables as HDF5 rows in fp32, fp16 or int8, a manifest); :class:`Predictor` loads one and predicts from raw keys
with NumPy alone, or onnxruntime (docs/serve.md).

Importing this package loads no part of the training stack (models, train, autograd); the writing side
(``bundle.py``, ``checkpoint.py``, the ONNX emitters) does, and is imported by name.
"""
from .errors import BundleError
from .predictor import Predictor
from .rows import FORMATS

__all__ = ["BundleError", "Predictor", "FORMATS"]
