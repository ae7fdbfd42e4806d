import numpy as np
import pytest

from gpuemb.autograd import Tensor
from gpuemb.nn import MLP, Dropout, Linear, Module


class Block(Module):
    def __init__(self, seed):
        self.proj = Linear(3, 4, seed=seed)
        self.heads = [Linear(4, 2, seed=seed + 1), Linear(4, 1, seed=seed + 2)]
        self.scale = Tensor(np.ones(2, dtype=np.float32), requires_grad=True)
        self.running = Tensor(np.zeros(2, dtype=np.float32))  # no gradient: not a parameter
        self.drop = Dropout(0.1)


def test_parameters_are_found_by_attribute_in_assignment_order():
    names = [name for name, _ in Block(0).named_parameters()]
    assert names == ["scale", "proj.weight", "proj.bias", "heads.0.weight", "heads.0.bias",
                     "heads.1.weight", "heads.1.bias"]
    assert len(Block(0).parameters()) == 7


def test_train_and_eval_reach_every_module():
    block = Block(0)
    assert block.eval() is block
    assert not any(m.training for m in block.modules())
    block.train()
    assert all(m.training for m in block.modules()) and len(list(block.modules())) == 5


def test_state_dict_round_trip_copies_values():
    a, b = Block(0), Block(10)
    state = a.state_dict()
    assert all(isinstance(v, np.ndarray) for v in state.values())
    assert not np.array_equal(state["proj.weight"], b.state_dict()["proj.weight"])
    b.load_state_dict(state)
    for name, value in b.state_dict().items():
        np.testing.assert_array_equal(value, state[name])
    state["proj.weight"] += 1  # a copy: the module is untouched
    assert not np.array_equal(a.proj.weight.data, state["proj.weight"])


def test_load_state_dict_names_what_does_not_match():
    block, state = Block(0), Block(0).state_dict()
    extra = dict(state, **{"proj.extra": np.zeros(1)})
    del extra["scale"]
    with pytest.raises(KeyError, match=r"missing \['scale'\], unexpected \['proj.extra'\]"):
        block.load_state_dict(extra)
    bad = dict(state, **{"heads.1.weight": np.zeros((2, 4))})
    with pytest.raises(ValueError, match=r"heads.1.weight has shape \(2, 4\), the parameter has shape \(1, 4\)"):
        block.load_state_dict(bad)


def test_zero_grad_clears_every_parameter(rng):
    mlp = MLP([3, 5, 1], seed=0)
    mlp(rng.standard_normal((4, 3)).astype(np.float32)).sum().backward()
    assert all(p.grad is not None for p in mlp.parameters())
    mlp.zero_grad()
    assert all(p.grad is None for p in mlp.parameters())
