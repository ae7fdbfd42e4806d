"""Module: the base of layers and models.

A module's parameters are the Tensors that require a gradient among its attributes; its sub-modules are its
attributes that are Modules, or lists and tuples of them. Both are found by walking the attributes when asked,
in the order they were assigned, so there is no registration step to forget. Names are dotted paths, as in
torch: ``layers.0.weight``.
"""
import numpy as np

from gpuemb.autograd import Tensor
from gpuemb.autograd.backend import get_array_module, to_host


class Module:
    """Parameters and sub-modules by attribute, train/eval mode, and state dicts of NumPy arrays."""

    training = True

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward")

    def __call__(self, *args, **kwargs):
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
        return self.train(False)

    def zero_grad(self):
        for p in self.parameters():
            p.zero_grad()

    def state_dict(self):
        """name -> a NumPy copy of each parameter."""
        return {name: to_host(p.data).copy() for name, p in self.named_parameters()}

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
