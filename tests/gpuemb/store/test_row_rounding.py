"""Stochastic rounding of float16 rows: the kernels equal the NumPy reference bit for bit, the rounding is unbiased,
updates below half a float16 spacing move a row in expectation, and a seed fixes every bit."""
import numpy as np
import pytest

from gpuemb.autograd import Tensor
from gpuemb.autograd.backend import to_device, to_host
from gpuemb.optim import AdamRule, SGDRule
from gpuemb.store.collection import EmbeddingCollection
from gpuemb.store.options import Initializer, StoreOptions, TableConfig
from gpuemb.store.rounding import stochastic_round, stochastic_round_ref
from gpuemb.store.snapshot import load_snapshot, save_snapshot
from gpuemb.store.table import EmbeddingTable


def spread(rng, shape):
    """float32 values over float16's whole range: subnormals, normals, the top binade and beyond."""
    return (rng.standard_normal(shape) * np.exp2(rng.integers(-30, 18, shape))).astype(np.float32)


@pytest.mark.parametrize("first", [0, 3])
def test_the_kernels_equal_the_reference(first, rng, xp):
    n, D = 40, 7
    x, keys = spread(rng, (n, D)), rng.integers(-2 ** 63, 2 ** 63 - 1, n)
    steps, seed = rng.integers(1, 2 ** 31 - 1, n).astype(np.int32), int(rng.integers(2 ** 64, dtype=np.uint64))
    x[0, :4] = [0.0, -0.0, 65504.0, -65530.0]  # exact zeros, the largest float16, the step to inf
    rows = xp.zeros((n, D + 2), np.float16)  # the weights of a stored row: a strided view, as pack writes it
    got = stochastic_round(xp.asarray(x), xp.asarray(keys), xp.asarray(steps), seed, rows[:, :D], first)
    want = stochastic_round_ref(x, keys, steps, seed, first)
    np.testing.assert_array_equal(to_host(got).view(np.uint16), want.view(np.uint16))


def test_the_rounding_is_unbiased(rng):
    """Each value, rounded 4,000 times (one key, steps 1..4,000), averages to itself within 5 standard errors of
    a rounding whose error is at most one spacing, the spacing's ``ulp`` at that value."""
    x = spread(rng, (1, 12))
    x = x[np.abs(x) < 60000]
    N = 4000
    rounded = stochastic_round_ref(np.repeat(x[None], N, 0), np.full(N, 17), np.arange(1, N + 1), 5)
    ulp = np.spacing(np.abs(x).astype(np.float16)).astype(np.float64)
    err = rounded.astype(np.float64).mean(0) - x
    assert (np.abs(err) <= 5 * (ulp / 2) / np.sqrt(N)).all(), err / ulp
    assert len(np.unique(rounded[:, 0])) == 2  # it does round both ways


def table(rounding, seed=4, placement="device", tmp_path=None, rule=None, lr=1e-4):
    opts = StoreOptions() if placement == "device" else StoreOptions("host", cache_rows=64, slab_rows=64)
    return EmbeddingTable(TableConfig("t", 8, "float16", Initializer("uniform", 1.0, seed=seed), rule or SGDRule(),
                                      lr, opts, rounding=rounding))


def train(t, pool, rng, steps):
    """``steps`` batches of 40 keys of ``pool``: more than the host table's cache holds, so rows go down and up."""
    for _ in range(steps):
        y = t.lookup(rng.choice(pool, 40))
        (y * Tensor(to_device(rng.standard_normal(y.shape).astype(np.float32)))).sum().backward()


def rows(t):
    keys, values, steps = (np.concatenate(parts) for parts in zip(*t.export()))
    return values[np.argsort(keys)].view(np.uint16)


def test_an_update_below_half_a_spacing_moves_the_row_in_expectation():
    """Weights near 1 (spacing 2**-11 below it) stepped by -1e-4 twenty times: round-to-nearest keeps every one at
    1; stochastic rounding moves them by -2e-3 on average, within 5 standard errors."""
    keys, n, steps = np.arange(600), 600, 20
    means = {}
    for rounding in ("nearest", "stochastic"):
        t = table(rounding)
        ones = np.ones((n, 8), np.float32)
        t.import_rows(keys, t.format.pack(ones), np.zeros(n, np.int32))
        for _ in range(steps):
            (t.lookup(keys) * Tensor(to_device(ones))).sum().backward()  # gradient 1: SGD steps by -lr
        w = np.concatenate([r for _, r, _ in t.export()]).astype(np.float64)
        means[rounding] = w.mean()
    assert means["nearest"] == 1.0
    bound = 5 * np.sqrt(steps) * 2.0 ** -11 / 2 / np.sqrt(n * 8)
    assert abs(means["stochastic"] - (1 - steps * 1e-4)) < bound, means


@pytest.mark.parametrize("rule", [SGDRule(), AdamRule()])
def test_a_seed_fixes_every_bit_on_every_store(rule, rng, tmp_path):
    keys = rng.integers(0, 10 ** 12, 150)
    seed = int(rng.integers(1 << 30))
    runs = {}
    for name, placement, rounding in (("device", "device", "stochastic"), ("again", "device", "stochastic"),
                                      ("host", "host", "stochastic"), ("nearest", "device", "nearest")):
        t = table(rounding, 4, placement, tmp_path, rule, lr=0.01)
        train(t, keys, np.random.default_rng(seed), 12)
        runs[name] = rows(t)
        t.close()
    np.testing.assert_array_equal(runs["again"], runs["device"])
    np.testing.assert_array_equal(runs["host"], runs["device"])  # a cached table rounds as a device one
    assert (runs["nearest"] != runs["device"]).any()


def test_a_table_batched_with_others_rounds_as_it_would_alone(rng):
    """Tables of one row format share a store whose keys are mixed with the table's index: the rounding draws from
    each table's own key, so every bit is as with a store per table."""
    configs = [TableConfig(f"t{i}", 8, "float16", Initializer("uniform", 1.0, seed=4), SGDRule(), 0.01,
                           rounding="stochastic") for i in range(2)]
    sparse = [rng.integers(0, 60, (32, 2)) for _ in range(6)]
    grads = [rng.standard_normal((32, 2, 8)).astype(np.float32) for _ in range(6)]
    got = []
    for batched in (True, False):
        coll = EmbeddingCollection(configs, batched=batched)
        for x, gy in zip(sparse, grads):
            (coll(to_device(x)) * Tensor(to_device(gy))).sum().backward()
        got.append([rows(t) for t in coll.tables])
    assert len(coll.stores) == 2 and len(EmbeddingCollection(configs).stores) == 1
    for a, b in zip(*got):
        np.testing.assert_array_equal(a, b)


def test_a_snapshot_restores_into_either_rounding(rng, tmp_path):
    """The stored rows are float16 either way: rounding is a setting of the training going on, as lr is."""
    saved = table("stochastic")
    train(saved, rng.integers(0, 10 ** 6, 100), rng, 3)
    save_snapshot({"t": saved}, tmp_path / "s.h5")
    restored = table("nearest")
    load_snapshot({"t": restored}, [tmp_path / "s.h5"])
    np.testing.assert_array_equal(rows(restored), rows(saved))


@pytest.mark.parametrize("rule", [SGDRule(), AdamRule()])
def test_column_shards_round_as_the_whole_table(rule, rng):
    """A shard of columns [a, b) draws by the whole row's columns, so the shards' rows join to the whole table's."""
    from gpuemb.distributed import ColumnShardTable  # a layer above the store, holding shards of its tables

    config = TableConfig("t", 7, "float16", Initializer("uniform", 1.0, seed=4), rule, 0.01, rounding="stochastic")
    whole, shards = EmbeddingTable(config), [ColumnShardTable(config, cols) for cols in ((0, 2), (2, 7))]
    for _ in range(5):
        keys, gy = rng.integers(0, 40, 16), rng.standard_normal((16, 7)).astype(np.float32)
        for t, (a, b) in [(whole, (0, 7)), (shards[0], (0, 2)), (shards[1], (2, 7))]:
            t.lookup(to_device(keys)).backward(to_device(np.ascontiguousarray(gy[:, a:b])))
    weights = [rows(t).view(np.float16)[:, :t.dim] for t in (whole, *shards)]
    np.testing.assert_array_equal(np.concatenate(weights[1:], 1), weights[0])
