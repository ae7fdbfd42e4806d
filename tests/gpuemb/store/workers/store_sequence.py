"""Runs one fixed sequence of lookups and updates on every rule and placement, on the device that
``GPUEMB_DEVICE`` picks, and saves each step's outputs and every table's final rows to ``argv[1]`` (.npz).

``test_device_equality.py`` runs it on the CPU and under the emulated device and compares the files bit for bit.
"""
import sys
import tempfile

import numpy as np

from gpuemb.autograd import Tensor, backend
from gpuemb.optim import AdagradRule, RowwiseAdagradRule, SGDRule
from gpuemb.store.options import Initializer, StoreOptions, TableConfig
from gpuemb.store.table import EmbeddingTable

RULES = {"sgd": SGDRule(), "adagrad": AdagradRule(), "rowwise_adagrad": RowwiseAdagradRule()}
D, BATCH, STEPS, KEYSPACE = 4, 48, 5, 160


def placements(folder):
    return {"device": StoreOptions(slab_rows=32),
            "host": StoreOptions("host", cache_rows=64, slab_rows=32),
            "ssd": StoreOptions("ssd", cache_rows=64, host_cache_rows=96, ssd_path=f"{folder}/rows.h5",
                                slab_rows=32, chunk_rows=8)}


def main(out):
    saved = {}
    with tempfile.TemporaryDirectory() as folder:
        for placement, options in placements(folder).items():
            for name, rule in RULES.items():
                config = TableConfig("t", D, rule=rule, lr=0.05, initializer=Initializer("normal", 0.5, seed=5),
                                     options=options)
                table, rng = EmbeddingTable(config), np.random.default_rng(11)
                for step in range(STEPS):
                    keys = backend.to_device(rng.integers(0, KEYSPACE, BATCH) * 7919)
                    y = table.lookup(keys)
                    (y * Tensor(backend.to_device(rng.standard_normal((BATCH, D)).astype(np.float32)))).sum().backward()
                    saved[f"{placement}/{name}/y{step}"] = backend.to_host(y.data)
                keys, rows, steps = map(np.concatenate, zip(*table.export()))
                order = np.argsort(keys)
                saved[f"{placement}/{name}/keys"] = keys[order]
                saved[f"{placement}/{name}/rows"] = rows[order]
                saved[f"{placement}/{name}/steps"] = steps[order]
                table.close()
    np.savez(out, **saved)


if __name__ == "__main__":
    main(sys.argv[1])
