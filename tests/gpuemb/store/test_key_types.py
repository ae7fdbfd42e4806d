"""Keys are integers: a float, bool or object key is one KeyTypeError line, the same at a table, a batched table,
every input of a collection and the Predictor, where it once was truncated (1.5 read key 1's row); integer keys
of any int or uint dtype read the rows their int64 values (a uint64's bits) read."""
import numpy as np
import pytest

from gpuemb.autograd import no_grad
from gpuemb.autograd.backend import to_host
from gpuemb.io.jagged import JaggedFeatures
from gpuemb.key_types import KeyTypeError
from gpuemb.store import EmbeddingCollection, EmbeddingTable, TableConfig

D = 4
# What every refusal says after its "where: " prefix (the dtype aside): the one message of gpuemb/key_types.py.
TAIL = ("; keys are integer ids, and a float would be truncated (1.5 would read key 1's row), so cast them to int64 "
        "where they are made")


def refusal(call):
    """The message ``call()`` raises as a KeyTypeError, split at its dtype: (where, dtype, rest)."""
    with pytest.raises(KeyTypeError) as e:
        call()
    text = str(e.value)
    assert "\n" not in text and text.endswith(TAIL), text
    where, _, rest = text.partition(": keys of dtype ")
    return where, rest[:-len(TAIL)]


def rows(table, keys):
    with no_grad():
        return to_host(table.lookup(keys).data)


@pytest.mark.parametrize("bad", [np.array([3.0, 1.5]), np.array([1.0, 1e30], np.float32), np.array([True, False]),
                                 np.array([1, None], object), [1.5, 2.0]])
def test_a_table_refuses_keys_that_are_not_integers(rng, bad):
    t = EmbeddingTable(TableConfig("t", D))
    before = rows(t, rng.integers(-2 ** 62, 2 ** 62, 20))  # a table in use, which a refusal leaves alone
    for call, method in ((lambda: t.lookup(bad), "lookup"), (lambda: t.prefetch(bad), "prefetch"),
                         (lambda: t.delete(bad), "delete"), (lambda: list(t.export(bad)), "export")):
        assert refusal(call) == (f"t.{method}", str(np.asarray(bad).dtype))
    assert len(t) == before.shape[0]


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32, np.uint64])
def test_integer_keys_of_any_dtype_read_their_int64_rows(rng, dtype):
    info = np.iinfo(dtype)
    keys = rng.integers(info.min, info.max, 50, dtype=dtype, endpoint=True)
    t = EmbeddingTable(TableConfig("t", D))
    np.testing.assert_array_equal(rows(t, keys), rows(t, keys.astype(np.int64)))


def test_uint64_keys_past_int64_keep_their_bits(rng):
    """2**64-1 was, and stays, the int64 key -1: a uint64 key is read by its bits."""
    keys = rng.integers(2 ** 63, 2 ** 64 - 1, 30, dtype=np.uint64, endpoint=True)
    t = EmbeddingTable(TableConfig("t", D))
    np.testing.assert_array_equal(rows(t, keys), rows(t, keys.view(np.int64)))
    assert len(t) == 30


def _collections():
    """Collections of each kind, by name: tables of their own (batched into one store), a shared table, and
    tables of their own with fixed hotness."""
    own = [TableConfig(f"t{i}", D) for i in range(3)]
    return {"own": EmbeddingCollection(own), "shared": EmbeddingCollection(TableConfig("s", D), n_features=3),
            "multi-hot": EmbeddingCollection(own, hotness=(1, 2, 1))}


def test_every_input_of_a_collection_refuses_float_keys(rng):
    c = _collections()
    sparse = rng.integers(0, 1000, (5, 3)).astype(np.float64) + 0.5
    assert refusal(lambda: c["own"](sparse)) == ("EmbeddingCollection: sparse", "float64")
    assert refusal(lambda: c["shared"](sparse)) == ("EmbeddingCollection: sparse", "float64")
    assert refusal(lambda: c["multi-hot"](rng.random((5, 4)))) == ("EmbeddingCollection: sparse", "float64")
    assert refusal(lambda: c["own"].table_keys(sparse)) == ("EmbeddingCollection: sparse", "float64")
    offsets = np.arange(6)
    bags = [(rng.integers(0, 100, 5), offsets), (sparse[:, 1], offsets), (rng.integers(0, 100, 5), offsets)]
    assert refusal(lambda: c["own"](bags)) == ("EmbeddingCollection: feature 1's bag", "float64")
    good = JaggedFeatures.from_lengths(("a", "b", "c"), rng.integers(0, 100, 20), rng.multinomial(20, [1 / 15] * 15))
    jagged = JaggedFeatures(good.names, good.values + 0.5, good.offsets, None, good.batch_size)
    assert refusal(lambda: c["shared"](jagged)) == ("EmbeddingCollection: JaggedFeatures values", "float64")


def test_a_batched_table_refuses_float_keys(rng):
    c = _collections()["own"]
    table = c.tables[1]
    assert getattr(table, "store", table) is not table  # batched with the others
    assert refusal(lambda: table.lookup(rng.random(4))) == ("t1.lookup", "float64")
    assert refusal(lambda: table.prefetch(rng.random(4))) == ("t1.prefetch", "float64")


def test_the_predictor_refuses_float_keys_with_the_same_message(tmp_path, rng):
    from gpuemb.models import build
    from gpuemb.serve import BundleError, Predictor
    from gpuemb.serve.bundle import write_bundle

    model = build("dlrm", 2, [TableConfig(f"t{i}", D) for i in range(3)], bottom=(D,), top=(4,)).eval()
    model(rng.standard_normal((5, 2)).astype(np.float32), rng.integers(0, 100, (5, 3)))
    write_bundle(model, tmp_path / "b")
    dense, sparse = rng.standard_normal((5, 2)), rng.integers(0, 100, (5, 3)) + 0.5
    with Predictor(tmp_path / "b", runtime="numpy") as p:
        assert refusal(lambda: p.predict(dense, sparse)) == ("predict: sparse", "float64")
        with pytest.raises(BundleError):  # also a BundleError, as every bad request is
            p.predict(dense, sparse)


@pytest.mark.gpu
def test_device_keys_are_checked_by_their_dtype_alone(rng):
    """The check reads no value: refusing device keys costs no launch, no copy and no wait."""
    from gpuemb.autograd import backend, launches, transfers

    t, c = EmbeddingTable(TableConfig("t", D)), _collections()["shared"]
    keys, sparse = backend.to_device(rng.random(16) * 100), backend.to_device(rng.random((4, 3)) * 100)
    offsets = backend.to_device(np.array([0, 1, 3, 4, 6, 7, 8, 10, 11, 12, 13, 15, 16]))  # bags of 1 and 2 keys
    jagged = JaggedFeatures(("a", "b", "c"), keys, offsets, None, 4)
    assert backend.is_device_array(keys)
    before, launched = transfers.COUNTS.snapshot(), launches.COUNTS.snapshot(this_thread=True)
    assert refusal(lambda: t.lookup(keys)) == ("t.lookup", "float64")
    assert refusal(lambda: t.prefetch(keys)) == ("t.prefetch", "float64")
    assert refusal(lambda: c(sparse)) == ("EmbeddingCollection: sparse", "float64")
    assert refusal(lambda: c(jagged)) == ("EmbeddingCollection: JaggedFeatures values", "float64")
    assert transfers.COUNTS.since(before) == dict.fromkeys(transfers.FIELDS, 0)
    assert launches.COUNTS.since(launched, this_thread=True)["by_phase"] == {}
