"""Fuzzing the run config files that ``tools/train.py --config FILE`` reads, TOML and JSON.

A valid config's bytes and values are mutated; reading the file either gives a config that checked itself and
comes back the same from the JSON a checkpoint records, or raises ConfigError. Anything else is a failure. The
command line turns that error into one line on stderr and exit code 2, before anything is built.
"""
import datetime
import json
import math
import os
import pathlib
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from gpuemb.autograd.plain import plain
from gpuemb.train import cli
from gpuemb.train.config import FIELDS, TrainConfig
from gpuemb.train.errors import ConfigError

pytestmark = pytest.mark.fuzz
FUZZ = settings(max_examples=int(os.environ.get("GPUEMB_FUZZ_EXAMPLES", "25")), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])  # one file, rewritten each example
TRAIN = pathlib.Path(__file__).resolve().parents[2] / "tools" / "train.py"

# flag-style and underscore keys, a table, a list and every kind of value
VALID = {"model": "dcn", "embedding-dim": 8, "batch_size": 256, "steps": 40, "lr": 0.001, "schedule": "cosine",
         "warmup_steps": 5, "store": "host", "cache_rows": 4096, "model_args": {"n_cross": 2, "deep": [16, 8]},
         "eval_rows": 500, "no_progress": True, "seed": 3}
# what a byte mutation inserts besides random bytes: the tokens that change a value's type or sign, or nest it
TOKENS = [b'"', b"'", b"[", b"]", b"{", b"}", b"=", b":", b",", b"\n", b"-", b"0x", b"1e999", b"nan", b"inf",
          b"null", b"true", b"1979-05-27", b"\x00", b"\xff\xfe", b"[[[[[[[[", b"[model]\n", b'"run": {']


def toml_value(v):
    """``v`` written as a TOML value (a table inline); TOML has no null, so there is no None in ``v``."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else "inf" if v > 0 else "-inf"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):  # a JSON string is a TOML basic string once DEL is escaped too
        return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(v, list):
        return "[" + ", ".join(map(toml_value, v)) + "]"
    return "{" + ", ".join(f"{toml_value(k)} = {toml_value(x)}" for k, x in v.items()) + "}"


def write(path, values):
    """``values`` as ``path``'s format says: JSON (dates and times as text), or TOML with the keys whose value is
    None left out."""
    if path.suffix == ".json":
        path.write_text(json.dumps(values, default=str))
    else:
        path.write_text("".join(f"{toml_value(k)} = {toml_value(v)}\n" for k, v in values.items() if v is not None))


def assert_config_or_config_error(path):
    """Reading ``path`` gives a config that survives a checkpoint's JSON, or ConfigError; nothing else."""
    try:
        config = TrainConfig.from_file(path)
    except ConfigError as e:
        assert str(e) and "\n" not in str(e)
        return
    saved = plain(config.to_dict())  # ValueError if a value were not JSON: a checkpoint could not record it
    again = TrainConfig.from_dict(saved).to_dict()
    assert json.dumps(plain(again), sort_keys=True) == json.dumps(saved, sort_keys=True)  # NaN equals itself


@st.composite
def mutated(draw, raw):
    """``raw`` with a few bytes changed, inserted (random ones or a token), deleted, or its tail cut off."""
    raw = bytearray(raw)
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(raw)))
        kind = draw(st.sampled_from(["set", "insert", "token", "delete", "truncate"]))
        if kind == "set" and i < len(raw):
            raw[i] = draw(st.integers(0, 255))
        elif kind == "insert":
            raw[i:i] = draw(st.binary(min_size=1, max_size=6))
        elif kind == "token":
            raw[i:i] = draw(st.sampled_from(TOKENS))
        elif kind == "delete":
            del raw[i:i + draw(st.integers(1, 8))]
        elif kind == "truncate":
            del raw[i:]
    return bytes(raw)


def valid_bytes(suffix, tmp_path):
    path = tmp_path / f"valid{suffix}"
    write(path, VALID)
    TrainConfig.from_file(path)  # the starting point is valid
    return path.read_bytes()


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_mutated_bytes_give_a_config_or_one_line_and_exit_code_2(suffix, tmp_path, capsys):
    """Read as a config, then as the command line reads it: ``--config FILE`` parses, or exits 2 with one line."""
    files = mutated(valid_bytes(suffix, tmp_path))

    @FUZZ
    @given(data=st.data())
    def check(data):
        path = tmp_path / f"run{suffix}"
        path.write_bytes(data.draw(files))
        assert_config_or_config_error(path)
        capsys.readouterr()
        try:
            config = cli.parse_config(["--config", str(path)])
        except SystemExit as e:
            err = capsys.readouterr().err
            assert e.code == 2 and err.startswith("train.py: error: ") and len(err.splitlines()) == 1, err
        else:
            assert isinstance(config, TrainConfig)
    check()


# the values a file can hold, JSON's null aside (TOML has none), and some of the settings' choices
SCALARS = (st.booleans() | st.integers() | st.integers(-2, 2) | st.floats() | st.text(max_size=12)
           | st.dates() | st.times() | st.datetimes()
           | st.sampled_from(["dlrm", "cosine", "host", "ssd", "fp16", "latest", "", "0", "true"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)
# every key as the file may spell it, the sections' names, and a few misspellings
KEYS = st.sampled_from(sorted(FIELDS) + [k.replace("_", "-") for k in FIELDS] + [
    "no_progress", "model-arg", "--steps", "run", "optimization", "batch_sise", "no_no_progress", ""])


@pytest.mark.parametrize("suffix", [".toml", ".json"])
@FUZZ
@given(changes=st.dictionaries(KEYS, VALUES | st.none(), max_size=4),
       args=st.dictionaries(st.sampled_from(["n_cross", "deep", "dropout"]) | st.text(max_size=6), VALUES, max_size=3))
@example(changes={"preset": []}, args={})  # a preset looked up as a key before it was checked: TypeError once
@example(changes={"preset": {"a": 1}, "model": ["dcn"]}, args={})
def test_mutated_values_give_a_config_or_a_config_error(suffix, changes, args, tmp_path):
    """Settings given other values (a key may be given twice, spelled two ways), and the model's own arguments."""
    path = tmp_path / f"run{suffix}"
    write(path, {**VALID, "model_args": {**VALID["model_args"], **args}, **changes})
    assert_config_or_config_error(path)


# damage that random mutations draw rarely or never, each once
BAD_FILES = {
    "nested.json": b"[" * 100_000 + b"]" * 100_000,  # deeper than the parser's recursion
    "nested.toml": b"steps = " + b"[" * 100_000 + b"]" * 100_000,
    "date.toml": b"steps = 40\nmodel_args = {dropout = 1979-05-27}\n",  # TOML values that JSON cannot hold
    "latin1.toml": "model = 'dcn'\n# \xe9t\xe9\n".encode("latin-1"),
    "typed.json": b'{"steps": 40, "lr": "fast"}',
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_a_damaged_file_is_a_config_error(name, tmp_path):
    (tmp_path / name).write_bytes(BAD_FILES[name])
    with pytest.raises(ConfigError, match=f"{name}: |--lr: "):
        TrainConfig.from_file(tmp_path / name)


def test_tools_train_exits_2_with_one_line_on_damaged_files(tmp_path):
    for name in ("nested.json", "date.toml", "typed.json"):
        (tmp_path / name).write_bytes(BAD_FILES[name])
        out = subprocess.run([sys.executable, str(TRAIN), "--config", str(tmp_path / name)], capture_output=True,
                             text=True, timeout=120, env={**os.environ, "GPUEMB_DEVICE": "cpu"})
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.startswith("train.py: error: ") and len(out.stderr.splitlines()) == 1, out.stderr
        assert out.stdout == ""  # refused before any data or model was made
