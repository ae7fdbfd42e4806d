"""Predictor: a bundle's predictions from raw keys, with NumPy (and h5py, onnx to read the graph) alone.

``predict(dense [B, n_dense], sparse)`` reads the sparse features as bags of keys (a ``[B, F]`` or
``[B, sum(hotness)]`` matrix, ``JaggedFeatures`` or a dict per feature: ``features.py``), looks them up in the
bundle's tables and pools them as the training model does (``embed.py``; a key the tables never saw reads its
initial weights, as the training model's eval does), then runs the ONNX graph on ``[dense, embeddings,
first-order weights]``: with the NumPy interpreter of ``onnx_numpy.py`` or with onnxruntime.

A request that does not fit is one ``BundleError`` line, never a wrong answer: keys that are not integers (the
store's own check, ``gpuemb/key_types.py``), features or bags other than the bundle's, dense values that are not
finite numbers (training never saw one: the readers skip such lines), wrong shapes, and a batch too large for
memory. An empty batch is answered with an empty result.
"""
import importlib.util
import os

import h5py
import numpy as np
import onnx

from .embed import Embedder
from .errors import BundleError
from .features import read_bags
from .manifest import read_manifest
from .onnx_numpy import NumpyGraph
from .tables import BundleTable

RUNTIMES = ("auto", "numpy", "onnxruntime")


def _runtime(name, model):
    if name not in RUNTIMES:
        raise BundleError(f"runtime={name!r}; use one of {', '.join(RUNTIMES)}")
    if name == "auto":
        name = "onnxruntime" if importlib.util.find_spec("onnxruntime") else "numpy"
    if name == "numpy":
        return name, NumpyGraph(model).run
    try:
        import onnxruntime
    except ImportError:
        raise BundleError("runtime='onnxruntime' but onnxruntime is not installed; pip install onnxruntime, or "
                          "use runtime='numpy'") from None
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outputs = [o.name for o in model.graph.output]
    return name, lambda feed: session.run(outputs, feed)


def _array(x, name, shape):
    """``x`` as a NumPy array; a list NumPy cannot stack (rows of different lengths) is one BundleError line."""
    try:
        return np.asarray(x)
    except (ValueError, TypeError):
        raise BundleError(f"predict: {name} is a {type(x).__name__} whose rows do not stack into one array (rows "
                          f"of different lengths?); give one array {shape}") from None


def _finite(dense):
    """``dense`` as float32, or a BundleError naming its first value that is not a finite float32."""
    if dense.dtype.kind not in "biuf":
        raise BundleError(f"predict: dense is {dense.dtype}; want numbers [B, n_dense], float32")
    with np.errstate(over="ignore"):  # a float64 past float32's range becomes inf, refused below
        out = dense.astype(np.float32, copy=False)
    bad = ~np.isfinite(out)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise BundleError(f"predict: dense[{r}, {c}] is {dense[r, c].item()!r}, not a finite float32; the model "
                          "never saw one (the readers skip such lines), so replace it (an empty field reads as 0) or "
                          "leave the row out")
    return out


class Predictor:
    """The bundle in folder ``path``. ``host_cache_rows``: None loads every row into memory; n reads rows from
    ``tables.h5`` on demand through an LRU of at most n rows per table. ``runtime``: "numpy", "onnxruntime", or
    "auto" (onnxruntime where it is importable). ``verify``: hash every file against the manifest first."""

    def __init__(self, path, host_cache_rows=None, runtime="auto", verify=True):
        path = os.fspath(path)
        if host_cache_rows is not None and (not isinstance(host_cache_rows, int) or host_cache_rows < 1):
            raise BundleError(f"host_cache_rows={host_cache_rows!r}; use an int >= 1, or None to load every row")
        self.manifest = m = read_manifest(path, verify)
        try:
            model = onnx.load(os.path.join(path, m["onnx"]))
            self.runtime, self._run = _runtime(runtime, model)
            self._file = h5py.File(os.path.join(path, m["tables_file"]), "r")
            self.tables = {name: BundleTable(self._file, name, meta, m["rows"], host_cache_rows)
                           for name, meta in m["tables"].items()}
            self.embedder = Embedder(m["collections"], self.tables)
        except BundleError:
            raise
        except Exception as e:  # the files passed their checksums: a bundle written by something else, whatever breaks
            raise BundleError(f"{path}: the bundle cannot be loaded ({type(e).__name__}: {e}); export it again "
                              "with tools/export.py") from None
        self.inputs = [i.name for i in model.graph.input]
        # an output's shape past the batch: () for logits [B], (T,) for [B, T]; an empty batch's answer has it
        self._task_shape = tuple(d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim[1:])

    def close(self):
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check(self, dense, sparse):
        B, bags = read_bags(sparse, self.manifest["features"])
        n_dense = self.manifest["n_dense"]
        dense = _array(dense, "dense", f"[B, n_dense] with n_dense = {n_dense}")
        if dense.shape != (B, n_dense):
            raise BundleError(f"predict: dense has shape {dense.shape}; want [B, n_dense] = [{B}, {n_dense}] (B "
                              "from the sparse keys)")
        return _finite(dense), B, bags

    def predict(self, dense, sparse, probabilities=False):
        """The model's eval output for ``dense [B, n_dense]`` and the ``sparse`` features of B samples (a matrix
        ``[B, F]`` or ``[B, sum(hotness)]``, ``JaggedFeatures``, or a dict of bags per feature: docs/serve.md):
        logits ``[B]`` (``[B, T]`` for several tasks), or with ``probabilities`` their sigmoid. An empty batch
        (B = 0) gives an empty float32 result of that shape."""
        B = None
        try:
            dense, B, bags = self._check(dense, sparse)
            if B == 0:
                return np.zeros((0, *self._task_shape), np.float32)
            feed = self.embedder.feed(B, bags)
            if "dense" in self.inputs:
                feed["dense"] = dense
            return self._run(feed)[1 if probabilities else 0]
        except MemoryError:
            B = sparse.shape[0] if B is None and isinstance(sparse, np.ndarray) and sparse.ndim else B
            rows = "" if B is None else f" of {B} rows"
            raise BundleError(f"predict: a batch{rows} does not fit in memory; predict it in smaller batches") \
                from None
