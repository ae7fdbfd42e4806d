"""Module extra state (gpuemb/nn/module.py): the non-parameter state a checkpoint must carry, such as the
dropout step of an MLP, whose next masks depend on it."""
import numpy as np
import pytest

from gpuemb.autograd import Tensor
from gpuemb.nn import MLP, Dropout, Module


class Tower(Module):
    def __init__(self, seed):
        self.mlps = [MLP([6, 8, 1], dropout=0.5, seed=seed), MLP([6, 4, 1], dropout=0.5, seed=seed + 1)]

    def forward(self, x):
        return self.mlps[0](x) + self.mlps[1](x)


def test_restored_extra_state_gives_the_same_next_dropout_masks(rng):
    x = Tensor(rng.standard_normal((16, 6)).astype(np.float32))
    a = Tower(3)
    for _ in range(3):
        a(x)
    states = a.extra_states()
    assert states == {"mlps.0": {"step": 3}, "mlps.1": {"step": 3}}
    b, c = Tower(3), Tower(3)
    b.load_extra_states(states)
    want = a(x).numpy()
    np.testing.assert_array_equal(b(x).numpy(), want)
    assert not np.array_equal(c(x).numpy(), want)  # step 0's masks: the state matters


def test_a_dropout_layer_carries_its_step(rng):
    x = Tensor(rng.standard_normal((32, 8)).astype(np.float32))
    a, b = Dropout(0.5, seed=7), Dropout(0.5, seed=7)
    a(x), a(x)
    assert a.extra_states() == {"": {"step": 2}}
    b.load_extra_states(a.extra_states())
    np.testing.assert_array_equal(b(x).numpy(), a(x).numpy())


def test_extra_states_that_do_not_fit_are_named():
    tower = Tower(0)
    with pytest.raises(KeyError, match=r"missing \['mlps.1'\], unexpected \['mlps.2'\]"):
        tower.load_extra_states({"mlps.0": {"step": 1}, "mlps.2": {"step": 1}})
    with pytest.raises(KeyError, match=r"got \['seed'\], it keeps \['step'\]"):
        tower.mlps[0].load_extra_state({"seed": 1})
    assert [name for name, _ in tower.named_modules()] == ["", "mlps.0", "mlps.0.layers.0", "mlps.0.layers.1",
                                                            "mlps.1", "mlps.1.layers.0", "mlps.1.layers.1"]
