"""Metrics as JSON lines: one object per line, flushed as it is written, so a crashed run keeps what it logged.

Every record has ``kind`` and ``step`` (steps trained when it was written):

- ``train``: ``loss`` (the mean over the steps since the last train record), ``lr``, ``embedding_lr``,
  ``epoch`` (0-based, of the last batch), ``samples``, and ``samples_per_s``;
- ``eval``: ``auc``, ``log_loss``, ``accuracy`` over ``rows`` eval rows (per task too, for several tasks),
  ``teacher_auc`` where the data has a planted teacher, and ``eval_s``;
- ``checkpoint``: ``path``.

``TIMING`` names the fields that measure time; the others are the same, bit for bit, in a run and in the same
run stopped and resumed. A resumed run first cuts the file back to its checkpoint's record: what a run writes
after its checkpoint (the last train record of its final step) is not part of the longer run.
"""
import json
import os

TIMING = ("samples_per_s", "eval_s")


class MetricsLog:
    """Keeps every record in ``records``, and appends it to ``path`` when one is given."""

    def __init__(self, path=None, resume_step=None):
        self.path, self.records = path, []
        if path is None:
            return
        if resume_step is not None and os.path.exists(path):
            self.records = _up_to_checkpoint(read_metrics(path), resume_step)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in self.records)

    def write(self, record):
        self.records.append(record)
        if self.path is not None:
            with open(self.path, "a") as f:
                f.write(json.dumps(record) + "\n")


def _up_to_checkpoint(records, step):
    """The records up to the checkpoint record of ``step``; without one, those before ``step``."""
    marks = [i for i, r in enumerate(records) if r["kind"] == "checkpoint" and r["step"] == step]
    return records[:marks[-1] + 1] if marks else [r for r in records if r["step"] < step]


def read_metrics(path):
    """The records of a metrics file; a line that is not JSON raises ValueError naming it."""
    records = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{i}: not a JSON line ({e})") from None
    return records


def without_timing(record):
    """``record`` without the fields that measure time: what must agree between a run and its resume."""
    return {k: v for k, v in record.items() if k not in TIMING}
