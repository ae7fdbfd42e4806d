"""``model.eval()`` alone is inference: dropout off, lookups that insert no key and pin no row, and nothing
recorded for a backward; ``model.train()`` turns all three back on."""
import numpy as np

from gpuemb.autograd.backend import to_host
from gpuemb.models import build
from gpuemb.store.init import initial_weights

B, F, D = 16, 4, 8


def test_eval_alone_is_inference(make_tables, rng):
    model = build("dlrm", 3, make_tables(F, D), seed=1, bottom=(6,), top=(8,), dropout=0.5)
    dense = rng.standard_normal((B, 3)).astype(np.float32)
    seen = rng.integers(0, 1 << 40, (B, F))
    out = model(dense, seen)
    assert out.requires_grad
    out.sum().backward()
    sizes = [len(t) for t in model.embeddings.tables]

    model.eval()
    unseen = rng.integers(0, 1 << 40, (B, F))
    first, second = model(dense, unseen), model(dense, unseen)
    assert not first.requires_grad and first.creator is None  # no tape
    np.testing.assert_array_equal(to_host(first.data), to_host(second.data))  # no dropout
    assert [len(t) for t in model.embeddings.tables] == sizes  # no key inserted
    assert all(t.in_flight.pinned == 0 for t in model.embeddings.tables)  # no row pinned
    rows = model.embeddings(unseen)
    table = model.embeddings.tables[0]
    np.testing.assert_array_equal(to_host(rows.data)[:, 0], initial_weights(table.config.initializer, unseen[:, 0], D))

    model.train()
    again = model(dense, unseen)
    assert again.requires_grad
    assert not np.array_equal(to_host(again.data), to_host(first.data))  # dropout is back
    again.sum().backward()
    assert [len(t) for t in model.embeddings.tables] == [s + B for s in sizes]  # 2**40 ids: no repeats
