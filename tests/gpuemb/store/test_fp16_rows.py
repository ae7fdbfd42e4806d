"""float16 rows: weights stored in float16 in every tier and snapshot, optimizer state float32, updates in float32
rounded to nearest, checked against a NumPy reference that rounds the same way."""
import json

import h5py
import numpy as np
import pytest

from gpuemb.autograd import Tensor
from gpuemb.autograd.backend import to_host
from gpuemb.optim import AdagradRule, AdamRule, RowwiseAdagradRule, SGDRule, init_rows, row_layout
from gpuemb.store.init import initial_weights
from gpuemb.store.options import Initializer, StoreOptions, TableConfig
from gpuemb.store.row_format import RowFormat
from gpuemb.store.snapshot import load_snapshot, save_snapshot
from gpuemb.store.table import EmbeddingTable

D = 6
RULES = [SGDRule(), AdagradRule(), RowwiseAdagradRule(), AdamRule()]


def options(placement, tmp_path):
    if placement == "device":
        return StoreOptions(slab_rows=16)
    return StoreOptions(placement, cache_rows=40, slab_rows=16, chunk_rows=4,
                        ssd_path=str(tmp_path / "t.h5") if placement == "ssd" else None)


def config(rule, dtype="float16", opts=None):
    return TableConfig("t", D, dtype, Initializer("normal", 0.5, seed=3), rule, 0.05, opts or StoreOptions())


class Reference:
    """Working rows in float32 per key: the rule's own update in float64, rounded to float32, then the weights to
    float16 (round to nearest even), as the table stores them."""

    def __init__(self, cfg):
        self.cfg, self.rows, self.steps = cfg, {}, {}

    def lookup(self, keys):
        for k in keys.tolist():
            if k not in self.rows:
                w = initial_weights(self.cfg.initializer, np.array([k]), D, "float16").astype(np.float32)
                self.rows[k], self.steps[k] = init_rows(self.cfg.rule, w)[0], 0
        return np.stack([self.rows[k][:D] for k in keys.tolist()])

    def backward(self, keys, gy):
        grads = {}
        for k, g in zip(keys.tolist(), gy):
            grads[k] = grads[k] + g if k in grads else g
        rule, layout = self.cfg.rule, row_layout(self.cfg.rule, D)
        for k, g in grads.items():
            row = self.rows[k][None].astype(np.float64)
            self.steps[k] += 1
            state = {n: row[:, layout[n]] for n in rule.state_names}
            rule.update(row[:, :D], g[None].astype(np.float64), state, self.cfg.lr, np.array([[self.steps[k]]]))
            row = row[0].astype(np.float32)
            row[:D] = row[:D].astype(np.float16)
            self.rows[k] = row


def train(table, ref, rng, steps=6):
    for _ in range(steps):
        keys = rng.integers(0, 50, 32) * 7919
        y = table.lookup(keys)
        np.testing.assert_array_equal(to_host(y.data), ref.lookup(keys))
        gy = rng.standard_normal(y.shape).astype(np.float32)
        (y * Tensor(gy)).sum().backward()
        ref.backward(keys, gy)


def stored_rows(table):
    return {k: r for ks, rows, _ in table.export() for k, r in zip(ks.tolist(), rows)}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: type(r).__name__)
def test_pack_keeps_the_state_bits_and_rounds_the_weights_to_nearest(rule, rng):
    fmt = RowFormat(rule, D, "float16")
    rows = rng.standard_normal((9, list(row_layout(rule, D).values())[-1].stop)).astype(np.float32)
    stored = fmt.pack(rows)
    assert stored.dtype == np.float16 and stored.shape == (9, fmt.width)
    np.testing.assert_array_equal(stored[:, :D], rows[:, :D].astype(np.float16))
    back = fmt.unpack(stored)
    np.testing.assert_array_equal(back[:, D:], rows[:, D:])  # float32 state, bit for bit
    for name, s in fmt.layout.items():
        part = np.ascontiguousarray(stored[:, s]).view(fmt.part_dtypes[name])
        np.testing.assert_array_equal(part, back[:, row_layout(rule, D)[name]])
    assert fmt.weight_bytes * 2 == RowFormat(rule, D).weight_bytes


@pytest.mark.parametrize("placement", ["device", "host", "ssd"])
@pytest.mark.parametrize("rule", RULES, ids=lambda r: type(r).__name__)
def test_a_float16_table_trains_like_the_rounding_reference(rule, placement, rng, tmp_path):
    cfg = config(rule, opts=options(placement, tmp_path))
    table, ref = EmbeddingTable(cfg), Reference(cfg)
    train(table, ref, rng)
    got, fmt = stored_rows(table), table.format
    assert got.keys() == ref.rows.keys() and len(got) > 40  # the cache evicted to the home tier
    for k, row in ref.rows.items():
        assert got[k].dtype == np.float16
        np.testing.assert_array_equal(fmt.unpack(got[k][None])[0], row)
    table.close()


def test_float16_weights_halve_the_tiers_bytes(rng):
    keys = rng.integers(0, 1 << 40, 3000)
    tables = {dtype: EmbeddingTable(config(SGDRule(), dtype, StoreOptions(slab_rows=1024)))
              for dtype in ("float32", "float16")}
    for t in tables.values():
        t.lookup(keys)
    half, full = (tables[d].stats() for d in ("float16", "float32"))
    assert half["keys"] == full["keys"] == 3000
    assert 2 * half["levels"][0]["bytes"] == full["levels"][0]["bytes"] and 2 * half["row_bytes"] == full["row_bytes"]
    adagrad = EmbeddingTable(config(RowwiseAdagradRule())).stats()
    assert adagrad["weight_bytes_per_row"] == 2 * D and adagrad["row_bytes"] == 2 * D + 4  # the state stays float32


def test_a_snapshot_keeps_float16_weights_and_restores_bit_for_bit(rng, tmp_path):
    cfg = config(AdamRule(), opts=options("host", tmp_path))
    table, ref = EmbeddingTable(cfg), Reference(cfg)
    train(table, ref, rng, steps=4)
    save_snapshot(table, tmp_path / "s.h5")
    with h5py.File(tmp_path / "s.h5") as f:
        g = f["tables/t"]
        assert g["rows"].dtype == np.float16
        dtypes, layout = json.loads(g.attrs["part_dtypes"]), json.loads(g.attrs["layout"])
        keys, rows = g["keys"][...], g["rows"][...]
    assert dtypes == {"weights": "float16", "exp_avg": "float32", "exp_avg_sq": "float32"}
    a, b = layout["exp_avg_sq"]
    for k, row in zip(keys.tolist(), rows):  # plain h5py reads both parts with the recorded dtypes
        np.testing.assert_array_equal(row[:D].astype(np.float32), ref.rows[k][:D])
        np.testing.assert_array_equal(row[a:b].view(np.float32), ref.rows[k][row_layout(cfg.rule, D)["exp_avg_sq"]])
    fresh = EmbeddingTable(config(AdamRule()))
    load_snapshot(fresh, [tmp_path / "s.h5"])
    before, after = stored_rows(table), stored_rows(fresh)
    assert before.keys() == after.keys()
    for k in before:
        np.testing.assert_array_equal(before[k].view(np.uint16), after[k].view(np.uint16))
    train(fresh, ref, rng, steps=2)  # and it trains on from there like the reference


@pytest.mark.parametrize("apply", [True, False])
def test_held_updates_wait_for_release_and_a_skip_changes_nothing(rng, apply):
    table, ref = EmbeddingTable(config(AdagradRule())), EmbeddingTable(config(AdagradRule()))
    keys = rng.integers(0, 30, 20)
    gy = rng.standard_normal((20, D)).astype(np.float32)
    held = table.hold_updates()
    (table.lookup(keys) * Tensor(gy)).sum().backward()
    (ref.lookup(keys) * Tensor(gy)).sum().backward()
    before = stored_rows(table)  # the backward held its update
    assert len(held) == 1 and table.in_flight.pinned == np.unique(keys).size
    table.release_updates(apply)
    assert table.in_flight.pinned == 0 and table.in_flight.held is None
    after, updated = stored_rows(table), stored_rows(ref)
    for k in after:
        same = after[k].view(np.uint16)
        np.testing.assert_array_equal(same, (updated if apply else before)[k].view(np.uint16))
