"""Function, grad mode and the tape.

A :class:`Function` runs ``forward`` on raw arrays. When grad mode is on and some input requires a gradient, each
output Tensor remembers the Function as its ``creator``; those links are the tape. ``backward`` sorts the
Functions that led to a tensor topologically and walks them in reverse, summing the gradients of tensors used
more than once. Each Function keeps the phase of the step it was applied in (``launches``), and its backward is
counted in the phase that maps to.
"""
import contextlib
import threading

from . import launches
from .backend import get_array_module, is_device_array, to_device, to_host
from .tensor import Tensor

_grad_mode = threading.local()  # per thread, so a loader thread's no_grad never leaks into training


def is_grad_enabled():
    return getattr(_grad_mode, "enabled", True)


@contextlib.contextmanager
def set_grad_enabled(enabled):
    previous = is_grad_enabled()
    _grad_mode.enabled = bool(enabled)
    try:
        yield
    finally:
        _grad_mode.enabled = previous


def no_grad():
    """Context in which nothing is recorded on the tape."""
    return set_grad_enabled(False)


class ShapeError(ValueError):
    """Operands whose shapes do not fit the op; the message names the op and the shapes."""


class Function:
    """One differentiable op. Subclasses write ``forward(*arrays)`` and ``backward(*grad_outputs)``.

    ``forward`` returns an array or a tuple of arrays and keeps on ``self`` only what ``backward`` needs.
    ``backward`` returns one gradient per input (``None`` for inputs without one). Inputs that are not Tensors
    (Python scalars, raw arrays) are constants: they reach ``forward`` as they are and get no gradient.

    ``early_backward``: among the Functions whose backward may run next, run this one first, as soon as its output
    gradients are complete. A sharded lookup sets it: its backward sends the gradients to their rows' owners, which
    then travel while the rest of the backward (the bottom MLP's) computes.
    """

    early_backward = False

    def apply(self, *inputs):
        arrays = [x.data if isinstance(x, Tensor) else x for x in inputs]
        self.needs_input_grad = tuple(isinstance(x, Tensor) and x.requires_grad for x in inputs)
        outputs = self.forward(*arrays)
        single = not isinstance(outputs, tuple)
        outputs = (outputs,) if single else outputs
        record = is_grad_enabled() and any(self.needs_input_grad)
        results = tuple(Tensor(y, requires_grad=record) for y in outputs)
        if record:
            self.inputs = inputs
            self.phase = launches.current_phase()
            self.output_meta = [(y.shape, y.dtype) for y in outputs]
            for i, r in enumerate(results):
                r.creator, r.output_index = self, i
        return results[0] if single else results

    @property
    def name(self):
        return type(self).__name__

    def forward(self, *arrays):
        raise NotImplementedError(f"{self.name} has no forward")

    def backward(self, *grad_outputs):
        raise NotImplementedError(f"{self.name} has no backward")


def _topological_order(root_fn):
    """The Functions that led to root_fn, each before every Function whose output it consumes, reversed."""
    order, visited, stack = [], set(), [(root_fn, False)]
    while stack:  # iterative post-order DFS: deep graphs must not hit Python's recursion limit
        fn, finished = stack.pop()
        if finished:
            order.append(fn)
            continue
        if id(fn) in visited:
            continue
        visited.add(id(fn))
        stack.append((fn, True))
        parents = [x.creator for x in fn.inputs if isinstance(x, Tensor) and x.creator is not None]
        # pushed first, visited last, finished last: in the reversed order an early_backward parent comes first
        for parent in sorted(parents, key=lambda p: not p.early_backward):
            if id(parent) not in visited:
                stack.append((parent, False))
    return order[::-1]


def _accumulate(current, g):
    return g if current is None else current + g  # never in place: g may be shared by several inputs


def _shared(gys, gxs):
    """The ids of the gradients in ``gxs`` that another holder may see: a view, an output gradient passed through,
    or one array returned for two inputs. A leaf takes those as a copy; the rest, made by this backward and held
    by nobody else, it takes as they are (a step's dense gradients are not copied once more)."""
    seen, shared = {id(g) for g in gys}, set()
    for g in gxs:
        if g is not None and (id(g) in seen or g.base is not None):
            shared.add(id(g))
        if g is not None:
            seen.add(id(g))
    return shared


def backward(tensor, grad=None, on_ready=None):
    """Fill ``.grad`` of every leaf tensor that ``tensor`` depends on and that requires a gradient. ``grad`` may
    be on the host for a device tensor, or the reverse (it comes from another stack): it is moved, one copy.

    ``on_ready(leaf)``, if given, is called once per leaf that gets a gradient, as soon as no Function still to run
    adds to it: while the rest of the backward runs, the caller can start on that gradient (an allreduce in
    buckets, gpuemb/distributed/dense.py). Leaves are reached in the backward's order, the last layers first."""
    if not tensor.requires_grad:
        raise RuntimeError("backward() on a tensor that does not require a gradient: no input asked for one, "
                           "or it was computed under no_grad()")
    if grad is None:
        if tensor.size != 1:
            raise ShapeError(f"backward() without a gradient needs a single-element tensor, not shape {tensor.shape}")
        # the seed counts with its creator's backward (a leaf has none: other)
        with launches.phase(launches.backward_phase(getattr(tensor.creator, "phase", None))):
            grad = tensor.xp.ones_like(tensor.data)
    grad = grad.data if isinstance(grad, Tensor) else grad
    if is_device_array(tensor.data) != is_device_array(grad):  # e.g. another stack's host gradient: one copy
        grad = to_device(grad) if is_device_array(tensor.data) else to_host(grad)
    if tuple(grad.shape) != tuple(tensor.shape):
        raise ShapeError(f"backward(): gradient of shape {tuple(grad.shape)} for a tensor of shape {tensor.shape}")
    if tensor.creator is None:
        tensor.grad = _accumulate(tensor.grad, grad.copy())
        if on_ready is not None and tensor.requires_grad:
            on_ready(tensor)
        return
    pending = {id(tensor.creator): [None] * len(tensor.creator.output_meta)}
    pending[id(tensor.creator)][tensor.output_index] = grad
    order = _topological_order(tensor.creator)
    last = _last_users(order) if on_ready is not None else {}
    for fn in order:
        with launches.phase(launches.backward_phase(fn.phase)):
            _backward_of(fn, pending)
        for leaf in last.get(id(fn), ()):
            if leaf.grad is not None:  # a Function may return None for an input it did not affect
                on_ready(leaf)


def _last_users(order):
    """``{id(fn): [leaf, ...]}``: each leaf that needs a gradient under the last Function of ``order`` that takes
    it, after whose backward its gradient is complete."""
    last = {}
    for fn in order:
        for x, needed in zip(fn.inputs, fn.needs_input_grad):
            if needed and isinstance(x, Tensor) and x.creator is None:
                last[id(x)] = (fn, x)
    by_fn = {}
    for fn, leaf in last.values():
        by_fn.setdefault(id(fn), []).append(leaf)
    return by_fn


def _backward_of(fn, pending):
    """Run ``fn.backward`` on its pending output gradients; hand each input's gradient to its creator's pending
    ones, or add it to a leaf's ``.grad``."""
    gys = pending.pop(id(fn))
    xp = get_array_module(*[g for g in gys if g is not None])
    gys = [xp.zeros(shape, dtype) if g is None else g for g, (shape, dtype) in zip(gys, fn.output_meta)]
    gxs = fn.backward(*gys)
    gxs = gxs if isinstance(gxs, tuple) else (gxs,)
    if len(gxs) != len(fn.inputs):
        raise RuntimeError(f"{fn.name}.backward returned {len(gxs)} gradients for {len(fn.inputs)} inputs")
    shared = _shared(gys, gxs)
    for x, gx, needed in zip(fn.inputs, gxs, fn.needs_input_grad):
        if not needed or gx is None:
            continue
        if tuple(gx.shape) != tuple(x.shape):
            raise ShapeError(f"{fn.name}.backward returned a gradient of shape {tuple(gx.shape)} "
                             f"for an input of shape {x.shape}")
        if x.creator is None:  # a leaf's grad is the caller's to change in place (a loss scaler unscales it)
            x.grad = _accumulate(x.grad, gx.copy() if x.grad is None and id(gx) in shared else gx)
        else:
            slot = pending.setdefault(id(x.creator), [None] * len(x.creator.output_meta))
            slot[x.output_index] = _accumulate(slot[x.output_index], gx)
