"""UpdateRule: the math of one optimizer, applied to arrays (Chainer's ``UpdateRule``).

A rule holds only hyperparameters. ``init_state(param)`` makes its state arrays, and
``update(param, grad, state, lr, step)`` changes ``param`` and the state arrays in place. The math is written
once with ``xp = get_array_module(param)`` and plain broadcasting, so the same rule serves two callers:

- the dense :class:`~gpuemb.optim.Optimizer`: a whole parameter of any shape, ``lr`` a float and ``step`` an int;
- the embedding store: gathered rows ``[n, D]`` with their state rows ``[n, D]``, and a per-row step count
  ``[n, 1]`` (each row has been updated a different number of times). ``lr`` may also be an array that
  broadcasts against ``param``.

``step`` counts the updates of this parameter (or row), this one included: 1 on the first update. Rules that
do not use it say so with ``needs_step = False``, and the store keeps no counter for them. ``state_names``
gives the state arrays in the order the store lays them out after the weights in a row.

Every named rule is in ``RULES``, the rules an embedding table may use by name (``--embedding-optimizer``):
``class SignSGDRule(UpdateRule, name="signsgd")`` registers one. A rule that also has a fused row kernel says so
in ``fused_args``; any other runs the reference row update, ``rowwise.apply_rows_ref``.
"""
from gpuemb.autograd.backend import get_array_module
from gpuemb.autograd.registry import Registry

from .settings import Settings

RULES = Registry("row rule")


class UpdateRule(Settings):
    """Base of the update rules: hyperparameters in, in-place update of ``param`` and its state out."""

    state_names = ()
    needs_step = False
    elementwise = True  # each element's update reads only that element: a dense optimizer may run it on many
    # parameters at once, flat (flat.py)

    def __init_subclass__(cls, name=None, **kwargs):
        super().__init_subclass__(**kwargs)
        if name is not None:
            RULES.add(name, cls)

    def fused_args(self):
        """``(kernel, hyper)``: the fused row kernel's math (a name of ``rowwise_kernels.KERNELS``) and up to four
        hyperparameters after the weight decay; None for a rule that has no fused kernel. Only a class that
        defines it itself is fused: a subclass may change the math, which the kernel would not follow."""
        return None

    def init_state(self, param):
        """The state arrays for ``param``: a dict ``{name: array shaped like param}``, zero by default."""
        xp = get_array_module(param)
        return {name: xp.zeros_like(param) for name in self.state_names}

    def update(self, param, grad, state, lr, step):
        """Apply one update to ``param`` and ``state`` in place."""
        raise NotImplementedError(f"{type(self).__name__} has no update")

    def decayed(self, param, grad):
        """``grad + weight_decay·param`` (L2 folded into the gradient), never changing ``grad`` itself."""
        return grad + self.weight_decay * param if self.weight_decay else grad


def rule_class(type_name, where):
    """The registered rule class named ``type_name`` (its class name, as ``state_dict()["type"]`` records it)."""
    found = next((c for c in RULES.values() if c.__name__ == type_name), None)
    if found is None:
        raise ValueError(f"{where}: rule type {type_name!r} is not one of "
                         f"{', '.join(c.__name__ for c in RULES.values())}")
    return found
