"""A table's lock orders the device work of the streams that hold it: the prefetch's side stream runs after the
updates queued before it, and the next lookup after the prefetch, with events and no wait on the host.

The emulated device runs everything at once, so it cannot show a race; it logs each ``Stream.wait_event``
(``emulated.cuda.WAITS``), and these tests check that the waits a real GPU needs are asked for.
"""
import threading

import numpy as np
import pytest

from gpuemb.autograd import Tensor, backend
from gpuemb.store.options import TableConfig
from gpuemb.store.ordered import OrderedLock
from gpuemb.store.table import EmbeddingTable


def test_it_is_a_lock():
    lock, seen, inside = OrderedLock(), [], [0]

    def work():
        for _ in range(200):
            with lock:
                inside[0] += 1
                seen.append(inside[0])
                inside[0] -= 1
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 800 and set(seen) == {1}


@pytest.fixture
def waits():
    if backend.DEVICE != "emulated":
        pytest.skip("the log of stream waits is the emulated device's (GPUEMB_DEVICE=emulated)")
    from gpuemb.autograd.emulated import cuda
    cuda.WAITS.clear()
    return cuda.WAITS


def last_event(lock, stream):
    return lock._last[stream.ptr].serial


@pytest.mark.gpu
def test_each_stream_waits_once_for_the_last_work_of_the_other(waits):
    lock, main, side = OrderedLock(), backend.current_stream(), backend.new_stream()
    with lock:
        pass
    first = last_event(lock, main)
    with side, lock:
        pass
    assert list(waits) == [(side.ptr, main.ptr, first)]
    with lock:
        pass
    with lock:  # the same side event: waited on once
        pass
    assert list(waits) == [(side.ptr, main.ptr, first), (main.ptr, side.ptr, last_event(lock, side))]


@pytest.mark.gpu
def test_a_prefetch_waits_for_the_update_and_the_next_lookup_for_the_prefetch(waits, rng):
    table = EmbeddingTable(TableConfig("t", 8, lr=0.1))
    main, side = backend.current_stream(), backend.new_stream()
    keys = [rng.integers(0, 50, 32) for _ in range(3)]
    out = table.lookup(keys[0])
    out.backward(backend.to_device(rng.standard_normal((32, 8)).astype(np.float32)))  # the update, under the lock
    updated = last_event(table._lock, main)
    with side:
        assert table.prefetch(keys[1])
    assert (side.ptr, main.ptr, updated) in waits
    prefetched = last_event(table._lock, side)
    rows = table.lookup(keys[1])
    assert (main.ptr, side.ptr, prefetched) in waits
    assert isinstance(rows, Tensor) and rows.shape == (32, 8)


@pytest.mark.gpu
def test_the_pipeline_orders_each_prefetch_after_the_main_stream_and_never_waits_on_the_host(waits, tmp_path,
                                                                                               monkeypatch):
    from gpuemb.train import TrainConfig, train
    syncs = []
    real = backend.synchronize
    monkeypatch.setattr(backend, "synchronize", lambda: syncs.append(threading.current_thread().name) or real())
    config = TrainConfig.from_dict({"model_args": {"top": [8], "bottom": [8]}, "embedding_dim": 8, "batch_size": 8,
                                    "train_rows": 64, "eval_rows": 16, "steps": 5, "eval_every": 100,
                                    "progress": False, "seed": 1})
    train(config)
    sides = {w for w, _, _ in waits if w != 0}
    assert len(sides) == 1  # the pipeline's side stream
    side = sides.pop()
    assert sum(1 for w, s, _ in waits if w == side and s == 0) >= 3  # each prefetch: after the main stream's work
    assert any(w == 0 and s == side for w, s, _ in waits)  # a lookup: after a prefetch
    assert not [name for name in syncs if name != "MainThread"]  # the worker never waits on the host


@pytest.mark.gpu
def test_the_next_step_waits_for_the_prefetch_even_where_no_table_took_its_lock(waits, monkeypatch):
    # A table's prefetch may stop before its lock (no room, or admission), after the worker mixed the keys that the
    # next forward reads: the main stream must still wait for the worker's stream.
    from gpuemb.store.table import EmbeddingTable
    from gpuemb.train import TrainConfig, train
    monkeypatch.setattr(EmbeddingTable, "prefetch", lambda self, keys, room=None, tags=None, copy=True: False)
    config = TrainConfig.from_dict({"model_args": {"top": [8], "bottom": [8]}, "embedding_dim": 8, "batch_size": 8,
                                    "train_rows": 64, "eval_rows": 16, "steps": 5, "eval_every": 100,
                                    "progress": False, "seed": 1})
    train(config)
    sides = {w for w, _, _ in waits if w != 0}
    assert len(sides) == 1
    side = sides.pop()
    assert sum(1 for w, s, _ in waits if w == 0 and s == side) >= 3  # one a prefetch, none under a table's lock
