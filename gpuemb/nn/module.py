"""Module: the base of layers and models.

A module's parameters are the Tensors that require a gradient among its attributes; its sub-modules are its
attributes that are Modules, or lists and tuples of them. Both are found by walking the attributes when asked,
in the order they were assigned, so there is no registration step to forget. Names are dotted paths, as in
torch: ``layers.0.weight``.

State that is not a parameter but that a resumed run needs (a counter such as the dropout step, which is the
state of a counter-based random stream) is a module's *extra state*: ``extra_state()`` returns it as plain
Python values and ``load_extra_state()`` puts it back; ``extra_states()`` gathers it from a whole tree of
modules by dotted module name, for a checkpoint.
"""
import numpy as np

from gpuemb.autograd import Tensor, no_grad
from gpuemb.autograd.backend import get_array_module, to_host
from gpuemb.autograd.checks import fail, is_int
from gpuemb.kernels.mlp import PRECISIONS


class Module:
    """Parameters and sub-modules by attribute, train/eval mode, and state dicts of NumPy arrays."""

    training = True
    precision = "fp32"  # what the fused layers compute in: see set_precision
    row0 = 0  # the index of this rank's first row in the global batch, which dropout draws by: see set_row0
    extra_state_names = ()  # attributes that a resume needs but that are not parameters, e.g. ("step",)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward")

    def __call__(self, *args, **kwargs):
        if self.training:
            return self.forward(*args, **kwargs)
        with no_grad():  # eval mode is inference, one switch: no tape, no pinned rows, no keys inserted
            return self.forward(*args, **kwargs)

    def named_children(self):
        """(name, module) of each direct sub-module."""
        for name, value in vars(self).items():
            if isinstance(value, Module):
                yield name, value
            elif isinstance(value, (list, tuple)):
                for i, item in enumerate(value):
                    if isinstance(item, Module):
                        yield f"{name}.{i}", item

    def modules(self):
        """This module and every module below it."""
        yield self
        for _, child in self.named_children():
            yield from child.modules()

    def named_modules(self, prefix=""):
        """(dotted name, module) of this module (named ``prefix``, "" at the top) and every module below it."""
        yield prefix, self
        for name, child in self.named_children():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def named_parameters(self, prefix=""):
        """(dotted name, Tensor) of every parameter of this module and those below it."""
        for name, value in vars(self).items():
            if isinstance(value, Tensor) and value.requires_grad:
                yield prefix + name, value
        for name, child in self.named_children():
            yield from child.named_parameters(f"{prefix}{name}.")

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def train(self, mode=True):
        """Training mode (dropout on) for this module and those below it; returns self."""
        for m in self.modules():
            m.training = mode
        return self

    def eval(self):
        """Evaluation mode, the one switch for inference: dropout off, embedding lookups that insert no key, and
        a forward that records nothing for a backward (as under ``no_grad``); returns self."""
        return self.train(False)

    def set_precision(self, precision):
        """The compute precision of this module and those below it: "fp32", or "fp16"/"bf16" on a GPU, where the
        fused MLPs compute in reduced precision on copies of the float32 parameters (docs/precision.md); returns
        self."""
        if precision not in PRECISIONS:
            raise ValueError(f"set_precision: {precision!r}; use one of {', '.join(PRECISIONS)}")
        for m in self.modules():
            m.precision = precision
        return self

    def set_row0(self, row0):
        """The index in the global batch of the first row this module and those below it see; returns self.

        Dropout draws each element by its row's index, so W ranks that each train a slice of the global batch,
        told where their slice starts, draw the masks one process draws on the whole batch."""
        if not is_int(row0, 0):
            fail("set_row0", f"{row0!r}; use an int >= 0, the index of the first row in the global batch")
        for m in self.modules():
            m.row0 = int(row0)
        return self

    def zero_grad(self):
        for p in self.parameters():
            p.zero_grad()

    def state_dict(self):
        """name -> a NumPy copy of each parameter."""
        return {name: to_host(p.data).copy() for name, p in self.named_parameters()}

    def extra_state(self):
        """This module's non-parameter state: ``{name: value}`` of the attributes in ``extra_state_names``."""
        return {name: getattr(self, name) for name in self.extra_state_names}

    def load_extra_state(self, state):
        """Restore what ``extra_state()`` returned; the names must be this module's ``extra_state_names``."""
        if sorted(state) != sorted(self.extra_state_names):
            raise KeyError(f"load_extra_state into {type(self).__name__}: got {sorted(state)}, it keeps "
                           f"{sorted(self.extra_state_names)}; load the state into the model it was saved from")
        for name, value in state.items():
            setattr(self, name, value)

    def extra_states(self):
        """``{dotted module name: extra_state()}`` of every module here and below that has any ("" is this one)."""
        return {name: state for name, m in self.named_modules() if (state := m.extra_state())}

    def load_extra_states(self, states):
        """Restore what ``extra_states()`` returned; the modules that have extra state must be the same."""
        modules = dict(self.named_modules())
        have = {name for name, m in modules.items() if m.extra_state()}
        missing, unexpected = sorted(have - states.keys()), sorted(states.keys() - have)
        if missing or unexpected:
            raise KeyError(f"load_extra_states into {type(self).__name__}: missing {missing}, unexpected "
                           f"{unexpected}")
        for name, state in states.items():
            modules[name].load_extra_state(state)

    def load_state_dict(self, state):
        """Copy arrays into the parameters of the same names, in place and on their device; all must match."""
        params = dict(self.named_parameters())
        missing, unexpected = sorted(params.keys() - state.keys()), sorted(state.keys() - params.keys())
        if missing or unexpected:
            raise KeyError(f"load_state_dict into {type(self).__name__}: missing {missing}, unexpected {unexpected}")
        for name, p in params.items():
            value = np.asarray(to_host(state[name]))
            if value.shape != p.shape:
                raise ValueError(f"load_state_dict into {type(self).__name__}: {name} has shape {value.shape}, "
                                 f"the parameter has shape {p.shape}")
            p.data[...] = get_array_module(p.data).asarray(value, dtype=p.dtype)
