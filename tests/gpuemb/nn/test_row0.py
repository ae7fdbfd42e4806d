"""set_row0: modules that see a slice of the global batch draw the dropout masks of the whole batch's rows."""
import numpy as np
import pytest

from gpuemb.autograd import Tensor
from gpuemb.nn import MLP, Dropout


def test_an_mlp_on_a_slice_gives_the_whole_batchs_rows(rng):
    x = rng.standard_normal((10, 6)).astype(np.float32)
    whole = MLP([6, 16, 8, 1], dropout=0.4, seed=2)
    part = MLP([6, 16, 8, 1], dropout=0.4, seed=2).set_row0(4)
    y = whole(Tensor(x)).numpy()
    np.testing.assert_allclose(part(Tensor(x[4:])).numpy(), y[4:], rtol=1e-6)
    assert not np.allclose(MLP([6, 16, 8, 1], dropout=0.4, seed=2)(Tensor(x[4:])).numpy(), y[4:])  # without it


def test_dropout_on_a_slice_of_a_3d_batch(rng):
    x = rng.standard_normal((6, 3, 5)).astype(np.float32)
    y = Dropout(0.5, seed=1)(Tensor(x)).numpy()
    assert (y == 0).any() and (y != 0).any()
    np.testing.assert_array_equal(Dropout(0.5, seed=1).set_row0(2)(Tensor(x[2:])).numpy(), y[2:])


def test_set_row0_reaches_every_module_and_checks_its_value():
    mlp = MLP([3, 4, 1], dropout=0.1).set_row0(7)
    assert {m.row0 for m in mlp.modules()} == {7}
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="set_row0: .*use an int >= 0"):
            mlp.set_row0(bad)
