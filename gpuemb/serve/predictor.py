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

``apply_delta`` follows a training run (docs/serve.md, "Following a training run"): it applies one of the run's
deltas (``delta_chain.py``), the rows changed and keys dropped since the step the Predictor serves and the dense
part then, to new tables and a new graph, and swaps them in at once; a delta refused leaves what is served as it
was.
"""
import importlib.util
import os

import h5py
import numpy as np
import onnx

from .delta_chain import read_delta
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
    "auto" (onnxruntime where it is importable). ``verify``: hash every file against the manifest first.
    ``from_step``: the step of the checkpoint the bundle was exported from, where the deltas it applies start
    (default: the one its manifest records, with the run's chain of deltas, for a bundle exported from a
    checkpoint)."""

    def __init__(self, path, host_cache_rows=None, runtime="auto", verify=True, from_step=None):
        path = os.fspath(path)
        if from_step is not None and (type(from_step) is not int or from_step < 0):
            raise BundleError(f"from_step={from_step!r}; use the step of the checkpoint the bundle was exported from")
        self.step, self.chain = from_step, None  # where the served state is in a training run's chain of deltas
        if host_cache_rows is not None and (not isinstance(host_cache_rows, int) or host_cache_rows < 1):
            raise BundleError(f"host_cache_rows={host_cache_rows!r}; use an int >= 1, or None to load every row")
        self.manifest = m = read_manifest(path, verify)
        if from_step is None and "origin" in m:  # an explicit from_step is the caller's word, and no chain is assumed
            self.step, self.chain = m["origin"]["step"], m["origin"]["chain"]
        try:
            model = onnx.load(os.path.join(path, m["onnx"]))
            self.runtime, run = _runtime(runtime, model)
            self._file = h5py.File(os.path.join(path, m["tables_file"]), "r")
            tables = {name: BundleTable(self._file, name, meta, m["rows"], host_cache_rows)
                      for name, meta in m["tables"].items()}
            self._serve(tables, run)
        except BundleError:
            raise
        except Exception as e:  # the files passed their checksums: a bundle written by something else, whatever breaks
            raise BundleError(f"{path}: the bundle cannot be loaded ({type(e).__name__}: {e}); export it again "
                              "with tools/export.py") from None
        self.inputs = [i.name for i in model.graph.input]
        # an output's shape past the batch: () for logits [B], (T,) for [B, T]; an empty batch's answer has it
        self._task_shape = tuple(d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim[1:])

    def _serve(self, tables, run):
        """Serve ``tables`` with the graph's ``run``: one assignment, so a predict reads one state or the other."""
        self._served = (tables, Embedder(self.manifest["collections"], tables), run)

    @property
    def tables(self):
        return self._served[0]

    def apply_delta(self, path):
        """Apply the delta of a training run whose table file is ``path`` (``delta-<step>.h5`` in its
        ``--delta-dir``, or any rank's file of a delta of several ranks, whose files are joined): drop its deleted
        keys, set its rows in the bundle's row format and take its dense part.
        It must start at the step served (``from_step``, then the last delta's end) and be of the same run; a delta
        out of order, after a gap, of another run or damaged is one BundleError line, and what is served stays as
        it was. Returns the step served now."""
        tables = self.tables
        d = read_delta(path, {name: t.dim for name, t in tables.items()})
        if self.step is None:
            raise BundleError(f"{d.path}: the Predictor does not know the step its bundle was exported at; pass "
                              "from_step, the step of the checkpoint (tools/serve_follow.py --from-step)")
        if self.chain is not None and d.chain != self.chain:
            raise BundleError(f"{d.path}: is of run {d.chain[:8]}, but the deltas applied so far are of run "
                              f"{self.chain[:8]}; follow one run's --delta-dir")
        if d.since != self.step:
            why = (f"the steps {self.step} to {d.since} are missing (a gap in the chain)" if d.since > self.step
                   else "it is out of order: that step is past")
            raise BundleError(f"{d.path}: holds the changes of steps {d.since} to {d.step}, but the Predictor serves "
                              f"step {self.step}, and {why}; apply the deltas in order from the bundle's step")
        inputs = [i.name for i in d.graph.graph.input]
        if inputs != self.inputs:
            raise BundleError(f"{d.path}: its graph takes {inputs}, the bundle's {self.inputs}; follow the run the "
                              "bundle was exported from")
        try:
            _, run = _runtime(self.runtime, d.graph)
        except Exception as e:  # noqa: BLE001  the graph passed its SHA-256: one some other writer made
            raise BundleError(f"{d.path}: its graph cannot be run ({type(e).__name__}: {e}); the delta is "
                              "damaged") from None
        self._serve({name: t.applied(*d.tables[name]) for name, t in tables.items()}, run)
        self.step, self.chain = d.step, d.chain
        return self.step

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
            _, embedder, run = self._served  # read once: a delta swapped in meanwhile is for the next batch
            feed = embedder.feed(B, bags)
            if "dense" in self.inputs:
                feed["dense"] = dense
            return run(feed)[1 if probabilities else 0]
        except MemoryError:
            B = sparse.shape[0] if B is None and isinstance(sparse, np.ndarray) and sparse.ndim else B
            rows = "" if B is None else f" of {B} rows"
            raise BundleError(f"predict: a batch{rows} does not fit in memory; predict it in smaller batches") \
                from None
