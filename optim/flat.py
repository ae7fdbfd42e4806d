"""One buffer for many parameters, so that a dense optimizer steps them all in a few calls.

A step that applies a rule parameter by parameter costs the host the rule's calls times the parameters: on a GPU,
Adam's seven CuPy calls over 16 tensors are 112 launches of about 10 µs of Python each, for a few hundred
kilobytes of arithmetic. So the optimizer moves the parameters of one dtype and device into one flat buffer
(``FlatGroup``): each Tensor's ``data`` becomes a view of it, with the same values, and every in-place write to a
parameter (the optimizer's, a checkpoint's load, a broadcast) lands in the buffer. The rule's state lives flat
beside it, each parameter's state a view too. A step in which every parameter of a group has a gradient and the
same update count gathers the gradients into one flat array (one concatenate) and runs the rule once, on the
buffer: an elementwise rule gives each element the very same result as it would per parameter.

Rules that are not elementwise (``UpdateRule.elementwise = False``, e.g. row-wise Adagrad's mean over a row) are
applied parameter by parameter, on the views.
"""
import numpy as np

from gpuemb.autograd.backend import get_array_module, is_device_array


class FlatGroup:
    """The parameters ``{name: Tensor}`` (one dtype, one device) in one flat buffer, their state beside it."""

    def __init__(self, params):
        self.names = list(params)
        tensors = list(params.values())
        xp = get_array_module(tensors[0].data)
        self.shapes = [t.shape for t in tensors]
        sizes = [int(np.prod(s, dtype=np.int64)) for s in self.shapes]
        self.bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.data = xp.empty(int(self.bounds[-1]), tensors[0].data.dtype)
        for t, view in zip(tensors, self.views(self.data)):
            view[...] = t.data
            t.data = view
        self.state = None  # the rule's flat state arrays, by state name, made on first use
        self._grad = None  # the flat gradient's buffer, made on first use

    def views(self, flat):
        """Each parameter's part of the flat array ``flat``, shaped as the parameter."""
        return [flat[a:b].reshape(shape) for a, b, shape in zip(self.bounds[:-1], self.bounds[1:], self.shapes)]

    def state_of(self, rule):
        """``{name: {state name: view}}``: each parameter's rule state, made (flat, by ``rule.init_state``) on
        first use."""
        if self.state is None:
            self.state = rule.init_state(self.data)
        per_state = {k: self.views(a) for k, a in self.state.items()}
        return {name: {k: views[i] for k, views in per_state.items()} for i, name in enumerate(self.names)}

    def gradient(self, grads):
        """The flat gradient of the group from each parameter's ``grads`` (one concatenate), into a buffer kept from
        step to step: a fresh one the size of the weights is, on the host, mapped and faulted in again every step
        (a third of the copy's time at 64 MB). The rule reads it within the step and keeps no reference."""
        xp = get_array_module(self.data)
        flat = [g.reshape(-1) for g in grads]
        if any(g.dtype != self.data.dtype for g in flat):  # the rule sees their own dtype, as it would per parameter
            return xp.concatenate(flat)
        if self._grad is None:
            self._grad = xp.empty_like(self.data)
        return xp.concatenate(flat, out=self._grad)


def flat_groups(params):
    """``params`` (``{name: Tensor}``) as ``FlatGroup``s, one per dtype and device, in the order first seen."""
    groups = {}
    for name, p in params.items():
        groups.setdefault((str(p.data.dtype), is_device_array(p.data)), {})[name] = p
    return [FlatGroup(g) for g in groups.values()]
