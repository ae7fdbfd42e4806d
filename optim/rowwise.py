"""The fused row update of embedding tables: each touched row's weights and optimizer state, in place.

The store keeps a table as ``storage [capacity, width]``, one row per slot laid out as
``[weights (D) | state_1 | state_2 ...]`` in the order of the rule's ``state_names``, each state D wide, or 1 for
row-wise Adagrad's accumulator (``row_layout``). Rules with ``needs_step`` (Adam) also keep a per-row update count
in a separate integer array ``steps [capacity]`` (int32 will do). It is not a column of ``storage``: a float32
column counts exactly only to 2**24, a 16-bit one to 2048; the float row stays exactly the rule's columns; and
rules without a step keep no counter at all.

After a backward, ``apply_rows(storage, steps, slots, grads, rule, lr)`` updates the rows ``slots [n]`` (unique,
as the embedding backward yields them) with ``grads [n, D]`` (already summed over duplicate IDs). Only those rows
change, each counting its own steps: lazy Adam. The reference, ``apply_rows_ref``, is the rule's own ``update``
on the gathered rows, so the math is the dense optimizers'; the fused kernels in ``rowwise_kernels`` are its fast
twins and are tested against it.
"""
import numpy as np

from gpuemb.autograd.backend import get_array_module, is_device_array
from gpuemb.autograd.checks import fail

from .rowwise_kernels import apply_rows_cpu, apply_rows_cuda, has_kernel


def row_layout(rule, D):
    """``{"weights": slice, <state name>: slice, ...}``: the columns of each part of a row, in storage order."""
    widths = {name: a.shape[-1] for name, a in rule.init_state(np.zeros((1, D), np.float32)).items()}
    layout, start = {"weights": slice(0, D)}, D
    for name in rule.state_names:
        layout[name], start = slice(start, start + widths[name]), start + widths[name]
    return layout


def row_width(rule, D):
    """The columns a row of ``rule`` needs for weights of width D."""
    return list(row_layout(rule, D).values())[-1].stop


def init_rows(rule, weights):
    """Full rows ``[n, row_width]`` from initial weights ``[n, D]``: the weights, then the rule's initial state."""
    state = rule.init_state(weights)
    return get_array_module(weights).concatenate([weights] + [state[name] for name in rule.state_names], axis=1)


def apply_rows_ref(storage, steps, slots, grads, rule, lr):
    """The definition: gather the rows, ``rule.update`` them with per-row steps ``[n, 1]``, scatter them back."""
    layout = row_layout(rule, grads.shape[1])
    rows = storage[slots]
    state = {name: rows[:, layout[name]] for name in rule.state_names}  # views: update writes into `rows`
    step = None
    if steps is not None:
        steps[slots] += 1
        step = steps[slots][:, None]
    rule.update(rows[:, layout["weights"]], grads, state, lr, step)
    storage[slots] = rows


def _check(storage, steps, slots, grads, rule):
    owner = "apply_rows"
    if storage.ndim != 2 or grads.ndim != 2 or slots.ndim != 1 or slots.dtype.kind not in "iu":
        fail(owner, f"want storage [capacity, width], integer slots [n] and grads [n, D]; got shapes "
             f"{storage.shape}, {slots.shape} ({slots.dtype}) and {grads.shape}")
    if grads.shape[0] != slots.shape[0]:
        fail(owner, f"{slots.shape[0]} slots but {grads.shape[0]} gradient rows; give one summed gradient row per "
             "slot")
    if storage.dtype != grads.dtype or storage.dtype.kind != "f":
        fail(owner, f"storage is {storage.dtype} and grads {grads.dtype}; use one float dtype for both")
    width = row_width(rule, grads.shape[1])
    if storage.shape[1] < width:
        fail(owner, f"storage rows are {storage.shape[1]} wide, but {type(rule).__name__} at D={grads.shape[1]} "
             f"needs {width} ({', '.join(row_layout(rule, grads.shape[1]))}); make the rows with init_rows")
    if steps is None and rule.needs_step:
        fail(owner, f"{type(rule).__name__} counts each row's updates; pass steps, an integer array [capacity]")
    if steps is not None and (steps.shape != storage.shape[:1] or steps.dtype.kind != "i"):
        fail(owner, f"steps has shape {steps.shape} ({steps.dtype}); want a signed integer array "
             f"[{storage.shape[0]}]")
    # The range of host slots only: checking device slots reads them back and waits for the stream; the store's
    # are in range by construction (its allocator adds rows before it hands their slots out).
    if not is_device_array(slots) and slots.size and (int(slots.min()) < 0 or int(slots.max()) >= storage.shape[0]):
        raise IndexError(f"apply_rows: slots span [{int(slots.min())}, {int(slots.max())}], outside the "
                         f"storage's {storage.shape[0]} rows")


def apply_rows(storage, steps, slots, grads, rule, lr):
    """Update rows ``slots`` of ``storage`` (and bump their ``steps``) with ``grads`` by ``rule`` at ``lr``, in place.

    ``slots`` must be unique (the kernels run the rows in parallel). ``steps`` may be None for rules without
    ``needs_step``; when given it is bumped whatever the rule. The CUDA kernel for CuPy arrays, numba for NumPy.
    """
    _check(storage, steps, slots, grads, rule)
    if not has_kernel(rule):
        raise TypeError(f"apply_rows: {type(rule).__name__} has no fused row kernel (its class defines no "
                        "fused_args); use update_rows, which runs the reference for it")
    impl = apply_rows_cuda if is_device_array(storage) else apply_rows_cpu
    impl(storage, steps, slots, grads, rule, lr)


def update_rows(storage, steps, slots, grads, rule, lr):
    """The row update of any rule: ``apply_rows`` where the rule has a fused kernel, else its reference (a rule
    registered without one trains all the same, at the reference's speed)."""
    if has_kernel(rule):
        apply_rows(storage, steps, slots, grads, rule, lr)
    else:
        _check(storage, steps, slots, grads, rule)
        apply_rows_ref(storage, steps, slots, grads, rule, lr)
