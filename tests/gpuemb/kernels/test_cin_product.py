"""The CIN's slabbed product against NumPy, with slabs small enough that every column range is its own slab."""
import numpy as np
import pytest

from gpuemb.autograd import Tensor, gradcheck
from gpuemb.kernels import cin_product
from gpuemb.kernels.cin_product import CINProduct, cin_product_ref


@pytest.fixture(params=[16, 1 << 30], ids=["slab-per-column", "one-slab"])
def slab_bytes(request, monkeypatch):
    monkeypatch.setitem(cin_product.SLAB_BYTES, False, request.param)
    return request.param


def test_the_product_matches_numpy(slab_bytes, rng):
    x, x0, W = rng.standard_normal((3, 10)), rng.standard_normal((4, 10)), rng.standard_normal((5, 12))
    y = CINProduct().apply(Tensor(x), Tensor(x0), Tensor(W)).numpy()
    np.testing.assert_allclose(y, cin_product_ref(x, x0, W), rtol=1e-12)


def test_the_product_gradients(slab_bytes, rng):
    arrays = rng.standard_normal((3, 7)), rng.standard_normal((2, 7)), rng.standard_normal((4, 6))
    gradcheck(lambda x, x0, W: CINProduct().apply(x, x0, W), *arrays)


def test_slabs_cover_every_column_once():
    for n, rows in [(1, 1), (10, 3), (1000, 7)]:
        slabs = cin_product._slabs(n, rows, 4, on_device=False)
        assert slabs[0][0] == 0 and slabs[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(slabs, slabs[1:]))


def test_mismatched_shapes_say_which(rng):
    with pytest.raises(ValueError, match=r"CINProduct: x \(3, 5\), x0 \(2, 5\) and W \(4, 7\) do not fit"):
        CINProduct().apply(Tensor(rng.standard_normal((3, 5))), Tensor(rng.standard_normal((2, 5))),
                           Tensor(rng.standard_normal((4, 7))))
