"""The flags of keys' admission and eviction: parsed, checked with one-line errors, and passed to the tables."""
import pytest

from gpuemb.store.options import EvictionRule
from gpuemb.store.table import EmbeddingTable
from gpuemb.train.cli import parse_config
from gpuemb.train.model import table_configs
from gpuemb.train.recipes import apply


def parse(argv):
    return apply(parse_config(argv), synthetic=True)  # the model's recipe, as a run applies it first


def test_the_flags_reach_the_tables(rng):
    ttl, every, after = (int(v) for v in rng.integers(2, 50, 3))
    c = parse(["--admit-after", str(after), "--evict-every", str(every), "--evict-ttl", str(ttl),
                      "--evict-max-l2", "0.25"])
    t = table_configs(c, None)
    assert (t.admit_after, t.evict_every, t.evict) == (after, every, EvictionRule(ttl_steps=ttl, max_l2=0.25))
    table = EmbeddingTable(t)  # and the table keeps what the rule reads: the tick of each key's last update
    assert table.admission.after == after and table.home.touched is not None
    plain = table_configs(parse([]), None)
    assert (plain.admit_after, plain.evict, plain.evict_every) == (None, None, None)
    assert EmbeddingTable(plain).home.touched is None and EmbeddingTable(plain).admission is None


@pytest.mark.parametrize("argv, says", [
    (["--evict-ttl", "5"], "--evict-ttl: is applied every --evict-every"),
    (["--evict-every", "5"], "--evict-every: evicts the keys that meet"),
    (["--evict-every", "5", "--evict-max-l2", "0"], "--evict-max-l2: max_l2=0.0; use a finite number > 0"),
    (["--admit-after", "0"], "--admit-after"),
])
def test_bad_combinations_name_the_flag(argv, says, capsys):
    with pytest.raises(SystemExit) as exit:
        parse_config(argv)
    err = capsys.readouterr().err
    assert exit.value.code == 2 and says in err and err.count("\n") == 1, err
