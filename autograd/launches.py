"""Counts of what a GPU host pays for besides its copies: the work it launches and the values it waits for, per
thread and per phase of a training step.

Beside the crossings that ``transfers`` counts, four counts (``FIELDS``):

- ``numba``: launches of the kernels defined through ``launch.kernel``;
- ``cupy``: calls of CuPy that launch work on the device, one each however many kernels CuPy runs for it
  (autograd/emulated/array.py says which calls count);
- ``cublaslt``: calls into cuBLASLt through nvmath: each ``Matmul.execute`` (a matmul) and each ``plan`` (a query
  of its heuristics, on the host; the fused MLP plans a shape once and keeps the plan);
- ``readbacks``: each time the host waits for a value that the device computed: a copy back (``get``, ``item``,
  ``tolist``, ``backend.to_host``, ``backend.item``), and each call whose result's size depends on the data (a
  boolean mask's selection, ``nonzero``, ``flatnonzero``, ``argwhere``, ``unique``, ``bincount``), which reads
  that size back before it can allocate, though it copies nothing explicitly. A sync that reads no value is a
  ``transfers`` count only.

Where they are counted: under the emulated device (``GPUEMB_DEVICE=emulated``), all four, exactly. On a real GPU,
only the backend's explicit readbacks, as ``transfers`` counts only the backend's explicit copies there: a count of
launches would put a Python call around each numba launch, more than the integer add it may cost, and CuPy's and
nvmath's calls are not wrapped. On the CPU nothing counts: numba's CPU kernels are not device launches, and there is
no CuPy or cuBLASLt.

Phases: ``with phase("lookup"):`` makes ``lookup`` the calling thread's phase until the block ends (the innermost
block wins), and what is counted meanwhile lands in that phase's bucket; outside every block it is ``other``. A
Function keeps the phase it was applied in, and its backward runs in the phase that ``BACKWARD`` maps it to: the
lookups' backward, which updates the tables' rows, counts as ``embedding_backward`` wherever the backward started.
A listener (``listen``) hears every change of phase: what times the phases of a step (gpuemb/train/phases.py), so
the marks that split the counts split the time too, and a step without one pays a test of a global per change.
"""
import threading

from .transfers import Counts

FIELDS = ("numba", "cupy", "cublaslt", "readbacks")
PHASES = ("upload", "lookup", "interaction", "mlp_forward", "loss", "loss_backward", "mlp_backward",
          "interaction_backward", "embedding_backward", "communication", "dense_optimizer", "prefetch", "other")
"""A training step's phases, in the order it runs them (gpuemb/train/steps.py and the models mark them):
``upload``, what the step moves or converts of its batch (the labels, the dense features); ``lookup``, the
embeddings' lookups; ``interaction``, a model's head outside its MLPs (the feature interaction and the glue
around it); ``mlp_forward``; ``loss``, the loss and the step's check of it; then the backward of each, where
``embedding_backward`` includes the rows' update; ``communication``, the dense gradients' allreduce over the ranks
(the embeddings' all-to-alls are in their lookups and their backward); ``dense_optimizer``, the dense parameters' step;
``prefetch``, the next batch's rows moved ahead (on its worker's thread); ``other``, the rest."""
BACKWARD = {"lookup": "embedding_backward", "interaction": "interaction_backward", "mlp_forward": "mlp_backward",
            "loss": "loss_backward"}
"""The phase a Function's backward counts in, by the phase it was applied in; any other runs in ``other``."""

_current = threading.local()
_listener = None  # called with the phase entered, on the thread that enters it, at each change (``listen``)


def current_phase():
    """The calling thread's phase."""
    return getattr(_current, "name", "other")


def backward_phase(forward):
    """The phase of the backward of a Function applied in ``forward``."""
    return BACKWARD.get(forward, "other")


def listen(listener):
    """Call ``listener(name)`` with the phase entered at every change of a thread's phase (on that thread), from
    now on; None stops. Returns the listener it replaces."""
    global _listener
    replaced, _listener = _listener, listener
    return replaced


class phase:
    """``with phase(name):`` counts go to ``name`` in this thread until the block ends (nested: the innermost)."""

    __slots__ = ("name", "_saved")

    def __init__(self, name):
        if name not in PHASES:
            raise ValueError(f"phase {name!r} is not one of {', '.join(PHASES)}")
        self.name = name

    def __enter__(self):
        self._saved = current_phase()
        _current.name = self.name
        if _listener is not None:
            _listener(self.name)
        return self

    def __exit__(self, *exc):
        _current.name = self._saved
        if _listener is not None:
            _listener(self._saved)
        return False


def report(flat):
    """``{(phase, field): n}`` as ``{field: n, ..., "by_phase": {phase: {field: n}}}``, the phases with a count."""
    by_phase = {p: {f: flat[p, f] for f in FIELDS} for p in PHASES if any(flat[p, f] for f in FIELDS)}
    return {**{f: sum(flat[p, f] for p in PHASES) for f in FIELDS}, "by_phase": by_phase}


def _flat(r):
    """A :func:`report` as ``{(phase, field): n}`` again."""
    return {(p, f): r["by_phase"].get(p, {}).get(f, 0) for p in PHASES for f in FIELDS}


def added(*reports):
    """The sum of reports (from :meth:`PhasedCounts.snapshot` or ``since``)."""
    flats = [_flat(r) for r in reports]
    return report({k: sum(flat[k] for flat in flats) for k in COUNTS.keys})


def per_step(total, steps):
    """The report ``total`` of ``steps`` steps as a mean per step, to two decimals."""
    def mean(counts):
        return {f: round(counts[f] / max(steps, 1), 2) for f in FIELDS}
    return {**mean(total), "by_phase": {p: mean(c) for p, c in total["by_phase"].items()}}


class PhasedCounts(Counts):
    """``FIELDS`` counted per phase, per thread and for all threads together."""

    def __init__(self):
        super().__init__([(p, f) for p in PHASES for f in FIELDS])

    def count(self, field, n=1):
        self.add({(current_phase(), field): n})

    def snapshot(self, this_thread=False):
        """The totals so far, of all threads or (``this_thread``) of the calling one, as a :func:`report`."""
        return report(super().snapshot(this_thread))

    def since(self, snapshot, this_thread=False):
        """What was counted after ``snapshot`` (from :meth:`snapshot` with the same ``this_thread``), a report."""
        now, before = _flat(self.snapshot(this_thread)), _flat(snapshot)
        return report({k: now[k] - before[k] for k in self.keys})


COUNTS = PhasedCounts()


def numba():
    COUNTS.count("numba")


def cupy():
    COUNTS.count("cupy")


def cublaslt():
    COUNTS.count("cublaslt")


def readback(n=1):
    COUNTS.count("readbacks", n)
