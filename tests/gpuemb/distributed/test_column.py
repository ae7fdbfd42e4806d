"""Column shards: a new key's weights are the whole row's columns, and rows split and join by columns."""
import numpy as np
import pytest

from gpuemb import optim
from gpuemb.autograd import no_grad
from gpuemb.distributed import ColumnShardTable
from gpuemb.distributed.layout import copy_columns, per_column, resized, shard_rows
from gpuemb.store.init import initial_weights
from gpuemb.store.options import Initializer, TableConfig

D = 7


@pytest.mark.parametrize("cols", [(0, 3), (3, 7), (2, 5)])
def test_new_and_unseen_keys_read_the_whole_rows_columns(cols, rng):
    config = TableConfig("w", D, initializer=Initializer("normal", seed=4), rule=optim.AdamRule())
    shard = ColumnShardTable(config, cols)
    keys = rng.integers(-2 ** 40, 2 ** 40, 9)
    whole = initial_weights(config.initializer, keys, D)[:, cols[0]:cols[1]]
    with no_grad():
        np.testing.assert_array_equal(shard.lookup(keys[:5]).data, whole[:5])
    np.testing.assert_array_equal(shard.lookup(keys, insert=False).data, whole)  # 4 of them absent
    assert len(shard) == 5 and shard.dim == cols[1] - cols[0] and not shard.coupled


def test_only_a_partial_rowwise_adagrad_shard_is_coupled():
    rowwise = TableConfig("w", D, rule=optim.RowwiseAdagradRule())
    assert ColumnShardTable(rowwise, (0, 3)).coupled and not ColumnShardTable(rowwise, (0, D)).coupled
    with pytest.raises(ValueError, match=r"cols=\(3, 9\) must lie within \[0, 7\)"):
        ColumnShardTable(rowwise, (3, 9))


@pytest.mark.parametrize("rule", [optim.AdamRule(), optim.RowwiseAdagradRule(), optim.SGDRule()])
def test_rows_split_and_join_by_columns(rule, rng):
    layout = {p: [s.start, s.stop] for p, s in optim.row_layout(rule, D).items()}
    rows = rng.standard_normal((5, layout[list(layout)[-1]][1])).astype(np.float32)
    assert per_column(rule) == ({"weights"} | ({"exp_avg", "exp_avg_sq"} if isinstance(rule, optim.AdamRule)
                                              else set()))
    edges = [(0, 2), (2, 7)]
    pieces = [shard_rows(rows, layout, D, cols, rule) for cols in edges]
    # against NumPy: each per-column part's columns, each per-row part whole
    for (a, b), piece in zip(edges, pieces):
        want = np.concatenate([rows[:, s + a:s + b] if e - s == D else rows[:, s:e] for s, e in layout.values()], 1)
        np.testing.assert_array_equal(piece, want)
    joined = np.zeros_like(rows)
    for (a, b), piece in reversed(list(zip(edges, pieces))):  # any order: per-row parts come from column 0's
        copy_columns(piece, resized(layout, D, b - a, rule), (a, b), joined, layout, (0, D), rule)
    np.testing.assert_array_equal(joined, rows)


def test_a_coupled_shard_refuses_to_hold_its_update_for_a_loss_scaler(rng):
    """Refused when the step starts holding (fp16's ``scaled_step``), before any row is looked up; a shard whose
    columns are the whole row holds as any table does."""
    shard = ColumnShardTable(TableConfig("w", D, rule=optim.RowwiseAdagradRule()), (0, 3))
    with pytest.raises(ValueError, match="cannot hold its updates for a loss scaler"):
        shard.hold_updates()
    whole = ColumnShardTable(TableConfig("w", D, rule=optim.RowwiseAdagradRule()), (0, D))
    assert whole.hold_updates() == []
    y = whole.lookup(rng.integers(0, 9, 4))
    y.backward(rng.standard_normal(y.shape).astype(np.float32))
    assert len(whole.in_flight.held) == 1 and whole.in_flight.pinned > 0
    whole.release_updates(apply=False)
    assert whole.in_flight.pinned == 0
