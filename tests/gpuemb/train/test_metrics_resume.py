"""A resume reads back the metrics file: a last line cut short by a hard kill is dropped, a bad one before it is an
error naming the file and the line."""
import json

import pytest

from gpuemb.train import ResumeError
from gpuemb.train.metrics_log import MetricsLog


def records(rng, n):
    return [{"kind": "train", "step": i + 1, "loss": float(rng.random())} for i in range(n)]


def write(path, recs, tail=""):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs) + tail)


@pytest.mark.parametrize("tail", ['{"kind": "train", "st', '{"kind": "train", "step": 5, "loss": 0.5}',
                                  '{"kind": "tr\n'])
def test_a_last_line_cut_short_is_dropped_with_a_warning(tmp_path, rng, capfd, tail):
    path, recs = tmp_path / "m.jsonl", records(rng, 4)
    write(path, recs, tail)
    log = MetricsLog(str(path), resume_step=3)
    assert log.records == recs[:2]  # before the resumed step
    assert f"m.jsonl:5: the last line was cut short" in capfd.readouterr().err
    assert [json.loads(line) for line in path.read_text().splitlines()] == recs[:2]


@pytest.mark.parametrize("bad", ["{not json", "[1, 2]", '{"kind": "train"}'])
def test_a_bad_line_before_the_last_is_an_error_naming_it(tmp_path, rng, bad):
    path, recs = tmp_path / "m.jsonl", records(rng, 4)
    path.write_text("".join(json.dumps(r) + "\n" for r in recs[:2]) + bad + "\n" + json.dumps(recs[2]) + "\n")
    with pytest.raises(ResumeError, match=r"m.jsonl:3: not a JSON record .*pass another --metrics-out"):
        MetricsLog(str(path), resume_step=3)
