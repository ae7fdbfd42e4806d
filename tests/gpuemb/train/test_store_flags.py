"""The store's settings that tools/train.py offers: --cache-policy, --evict-score with --evict-below, and
--row-rounding. Each reaches the tables, and a run saved and resumed equals one that never stopped, bit for bit."""
import numpy as np
import pytest

from gpuemb.store.options import EvictionRule
from gpuemb.train import Reporter, TrainConfig, train
from gpuemb.train.cli import parse_config
from gpuemb.train.run import ResumeError

TINY = dict(model_args={"top": [16], "bottom": [8]}, embedding_dim=4, batch_size=64, eval_rows=500, progress=False,
            seed=1)
N, M = 3, 3


class Capture(Reporter):
    """Every table's rows and every dense parameter of the run it reports on, read as it ends."""

    def start(self, run):
        self.run = run

    def close(self):
        if not hasattr(self, "run"):  # the run failed before its start
            return
        self.tables = {name: t for name, t in self.run.tables.items()}
        self.configs = {name: t.config for name, t in self.tables.items()}
        self.arrays = {f"param {k}": np.asarray(v) for k, v in self.run.model.state_dict().items()}
        for name, t in self.tables.items():
            keys, rows, steps = (np.concatenate(p) for p in zip(*t.export()))
            order = np.argsort(keys)
            self.arrays.update({f"{name} keys": keys[order], f"{name} rows": rows[order],
                                f"{name} steps": steps[order]})


def whole_and_resumed(tmp_path, flags, resumed_flags=None):
    """(a run of N + M steps, one of N steps saved then resumed for M more with ``resumed_flags``), captured."""
    whole, resumed = Capture(), Capture()
    train(TrainConfig.from_dict(TINY | flags | {"steps": N + M}), whole)
    ckpt = {"checkpoint_dir": str(tmp_path / "ckpt")}
    train(TrainConfig.from_dict(TINY | flags | ckpt | {"steps": N}))
    train(TrainConfig.from_dict(TINY | (resumed_flags or flags) | ckpt | {"steps": N + M, "resume": "latest"}),
          resumed)
    assert whole.arrays.keys() == resumed.arrays.keys()
    for name, value in whole.arrays.items():
        np.testing.assert_array_equal(resumed.arrays[name], value, err_msg=name)
    return whole, resumed


HOST = {"store": "host", "cache_rows": 1800}  # a batch has about 850 unique keys: full from the third step on


def test_cache_policy_reaches_the_caches_and_a_resume_may_change_it(tmp_path):
    """Which rows a cache keeps decides where rows are read from, never their values: a run resumed under lfu
    equals one that ran under lru throughout."""
    whole, resumed = whole_and_resumed(tmp_path, HOST, HOST | {"cache_policy": "lfu"})
    assert whole.configs["embeddings"].options.policy == "lru"
    assert resumed.configs["embeddings"].options.policy == "lfu" and resumed.tables["embeddings"].top.policy.lfu


def test_evict_score_reaches_the_tables_and_resumes(tmp_path):
    flags = {"evict_every": 2, "evict_score": "count", "evict_below": 2.0}  # an eviction on each side of step N
    whole, _ = whole_and_resumed(tmp_path, flags)
    assert whole.configs["embeddings"].evict == EvictionRule(score="count", below=2.0)


def test_stochastic_row_rounding_resumes_bit_for_bit(tmp_path):
    flags = {"embedding_dtype": "fp16", "row_rounding": "stochastic"}
    whole, _ = whole_and_resumed(tmp_path, flags)
    assert whole.configs["embeddings"].rounding == "stochastic"
    nearest = Capture()
    train(TrainConfig.from_dict(TINY | flags | {"steps": N + M, "row_rounding": "nearest"}), nearest)
    assert (nearest.arrays["embeddings rows"] != whole.arrays["embeddings rows"]).any()  # it did round otherwise
    with pytest.raises(ResumeError, match="row_rounding|row-rounding"):  # what a step computes: kept on resume
        train(TrainConfig.from_dict(TINY | flags | {"checkpoint_dir": str(tmp_path / "ckpt"), "steps": N + M + 1,
                                                    "resume": "latest", "row_rounding": "nearest"}))


@pytest.mark.parametrize("argv, says", [
    (["--cache-policy", "lfu"], "--cache-policy: chooses what a full cache evicts, and --store device has none"),
    (["--cache-policy", "mru", "--store", "host", "--cache-rows", "9"], "--cache-policy: invalid choice: 'mru'"),
    (["--row-rounding", "stochastic"], "--row-rounding: stochastic rounds fp16 weights; add --embedding-dtype fp16"),
    (["--evict-every", "2", "--evict-score", "l2"], "--evict-below: score and below go together"),
    (["--evict-every", "2", "--evict-below", "0.1"], "--evict-score: score and below go together"),
    (["--evict-every", "2", "--evict-score", "norm", "--evict-below", "1"], "--evict-score: invalid choice: 'norm'"),
    (["--evict-score", "l2", "--evict-below", "1"], "--evict-score: is applied every --evict-every"),
])
def test_bad_store_flags_say_what_to_change_in_one_line(argv, says, capsys):
    with pytest.raises(SystemExit) as exit:
        parse_config(argv)
    err = capsys.readouterr().err
    assert exit.value.code == 2 and says in err and err.count("\n") == 1, err
