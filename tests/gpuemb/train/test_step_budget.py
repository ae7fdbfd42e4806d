"""What one training step costs the host of a GPU, held to budgets on the emulated device (issue 27): kernel
launches of every kind together (numba, CuPy and cuBLASLt) and reads of device values back, per step, whatever
the number of tables.

Counts are exact, but when a level's bounds on the host say it may be full (they grow by each batch's keys, as
the host never reads how many were new) it reads its true counts once and makes room (``level._settle``): one
read and a few launches more, on the steps where the bounds run out. So the counted steps read the warm-up's
batches again (every key known, no table growing; a step launches what it would with new keys, whose rows are
drawn and written under a mask), each case is held to its cheapest step, and its others may add one such settle
(``SETTLE``). A settle makes room for a few batches ahead, at most an eighth of the keys: the tiny tables here (a
few hundred keys, batches of 4 rows) are within a batch of their limits at every step, where a real table
settles once in several. So the cases may differ by one settle too, which follows a table's size against the
batch, not the number of tables.

The budgets are the issue's: 175 launches for DLRM on the device store, and one read back, the loss (with its
finite flag). A batch's unique keys come at a fixed size, its N keys, their count kept on the device
(``kernels/unique.py``, ``unique_keys_fixed``), so nothing reads how many are distinct. The host store's device
cache reads more, in the prefetch: being bounded, it takes the exact unique, whose size it reads to weigh the
prefetch and its evictions by U rather than N (``EmbeddingTable._unique``); full at every step, it reads its
counts to evict (``_settle``); and
its misses go down to the host, which reads the size of their mask, then their keys and, in a store of several
tables, their tags (``CacheLevel._fetch``); evicting dirty rows writes them down, two reads more where it happens.
"""
import importlib.util
import pathlib
from types import SimpleNamespace

import pytest

from gpuemb.autograd import backend

TOOL = pathlib.Path(__file__).resolve().parents[3] / "tools" / "count_step.py"
LAUNCHES = ("numba", "cupy", "cublaslt")
SETTLE = (8, 1)  # launches and reads back of one level's settle, above a step's cheapest
TAGS = 4  # the calls a store of several tables pays for its tags, which a shared table has not
BUDGETS = {  # (launches, reads back) of a steady step, and the cases that must cost the same, to one settle
    "dlrm": ((175, 1), ["dlrm-13", "dlrm-52", "dlrm-shared"]),
    "dcn-multihot": ((200, 1), ["dcn-multihot-13", "dcn-multihot"]),
    "dlrm-host": ((200, 6), ["dlrm-host-13", "dlrm-host"]),
}

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(backend.real_gpu(), reason="counts the emulated device's calls, exactly")]


def count_step():
    spec = importlib.util.spec_from_file_location("count_step", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def steps_of(tool, name):
    """``[(launches, reads back)]`` of each counted step of case ``name``."""
    counted = tool.step_counts(tool.CASES[name], SimpleNamespace(warmup=2, steps=2, batch=4, rows=8))
    return [(sum(c[k] for k in LAUNCHES), c["readbacks"]) for c in counted]


def within_a_settle(counts, of, more=0):
    return all(n - of[0] <= SETTLE[0] + more and r - of[1] <= SETTLE[1] for n, r in counts)


@pytest.mark.parametrize("model", list(BUDGETS))
def test_a_step_keeps_its_budget_whatever_the_number_of_tables(model):
    (launches, readbacks), cases = BUDGETS[model]
    tool = count_step()
    steady = {}
    for name in cases:
        steps = steps_of(tool, name)
        steady[name] = min(steps)
        assert within_a_settle(steps, steady[name]), f"{name}: {steps}"
    assert within_a_settle(steady.values(), min(steady.values()), TAGS), steady
    assert min(r for _, r in steady.values()) <= readbacks, steady  # a step that settles nothing
    for name, (n, reads) in steady.items():  # a case whose tiny tables settle at every step, one settle more
        assert n <= launches, f"{name}: {n} launches a step, over the budget of {launches}"
        assert reads <= readbacks + SETTLE[1], f"{name}: {reads} reads back a step, over {readbacks} and a settle"
