"""Metrics as JSON lines: one object per line, flushed as it is written, so a crashed run keeps what it logged.

Every record has ``kind`` and ``step`` (steps trained when it was written):

- ``train``: ``loss`` (the mean over the steps since the last train record), ``lr``, ``embedding_lr``,
  ``epoch`` (0-based, of the last batch), ``samples``, ``samples_per_s``, what a step paid the device for,
  ``transfers``, ``transfers_ahead`` and ``launches`` (``StepWindow.take``), the embedding store over the
  window, ``tables`` and ``hit_rate`` (``Loop.table_record``, ``table_stats.py``), and with ``--phase-times``
  ``phases``, seconds per step by phase (``phases.py``);
- ``eval``: ``auc``, ``log_loss``, ``accuracy`` over ``rows`` eval rows (per task too, for several tasks),
  ``teacher_auc`` where the data has a planted teacher, ``eval_s``, and what this rank read of the eval set,
  ``rows_read`` and ``bytes_read`` (on several ranks its part of each eval batch: rank 0's in the file);
- ``checkpoint``: ``path``;
- ``warning``: ``message``, once, after the first eval that shows the model collapsed (``Loop.collapse_warning``).

``TIMING`` names the fields that measure time, and ``CACHES`` those that follow what the caches hold, which a
resume starts empty (its rows are restored to their home); the others are the same, bit for bit, in a run and in
the same run stopped and resumed. A resumed run first cuts the file back to its checkpoint's record: what a run writes
after its checkpoint (the last train record of its final step) is not part of the longer run. A last line that a
hard kill cut short (no newline, or not JSON) was never a record: a resume drops it and says so on stderr.
"""
import json
import os
import sys

from .errors import ConfigError, ResumeError, TrainError

TIMING = ("samples_per_s", "eval_s", "phases")
CACHES = ("tables", "hit_rate")


class MetricsLog:
    """Keeps every record in ``records``, and appends it to ``path`` when one is given."""

    def __init__(self, path=None, resume_step=None):
        self.path, self.records = path, []
        if path is None:
            return
        if resume_step is not None and os.path.exists(path):
            try:
                records = read_metrics(path, torn_tail=True)
            except ValueError as e:
                raise ResumeError(f"--metrics-out {e}; move the file away or pass another --metrics-out") from None
            self.records = _up_to_checkpoint(records, resume_step)
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in self.records)
        except OSError as e:  # a folder, a path under a file, a read-only or full disk: before the first step
            why = "a file stands where its folder would be" if isinstance(e, FileExistsError) else e.strerror or e
            raise ConfigError(f"--metrics-out {path}: cannot be written ({why}); pass a file in a folder this user "
                              "can write") from None

    def write(self, record):
        self.records.append(record)
        if self.path is not None:
            try:
                with open(self.path, "a") as f:
                    f.write(json.dumps(record) + "\n")
            except OSError as e:  # a full disk: what was written stays, and a resume drops a torn last line
                raise TrainError(f"--metrics-out {self.path}: writing the {record['kind']} record of step "
                                 f"{record['step']} failed ({e.strerror}); free space on that disk, or pass "
                                 "--metrics-out on another one (a --resume continues from the last "
                                 "checkpoint)") from None


def _up_to_checkpoint(records, step):
    """The records up to the checkpoint record of ``step``; without one, those before ``step``."""
    marks = [i for i, r in enumerate(records) if r["kind"] == "checkpoint" and r["step"] == step]
    return records[:marks[-1] + 1] if marks else [r for r in records if r["step"] < step]


def read_metrics(path, torn_tail=False):
    """The records of a metrics file; a line that is not a JSON record raises ValueError naming the file and the
    line. ``torn_tail``: a last line without its newline, or not JSON, is dropped with a warning on stderr."""
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    records, end = [], max((i for i, line in enumerate(lines, 1) if line.strip()), default=0)
    for i, line in enumerate(lines, 1):
        last = i == end
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not (isinstance(record, dict) and isinstance(record.get("kind"), str)
                    and type(record.get("step")) is int):
                raise ValueError("a record needs a 'kind' and a 'step'")
            if torn_tail and last and i == len(lines):  # no newline after it: the write was cut short
                raise ValueError("no newline at its end")
        except (ValueError, RecursionError) as e:
            if torn_tail and last:
                print(f"warning: {path}:{i}: the last line was cut short ({e}); it is dropped", file=sys.stderr,
                      flush=True)
                break
            raise ValueError(f"{path}:{i}: not a JSON record ({e})") from None
        records.append(record)
    return records


def without_timing(record):
    """``record`` without the fields that measure time or the caches: what must agree between a run and its
    resume."""
    return {k: v for k, v in record.items() if k not in TIMING + CACHES}
