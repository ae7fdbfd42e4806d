"""Evaluation over a whole eval set: AUC, log-loss and accuracy, streaming, in eval mode and without a tape.

The eval rows go through the loader in file order (no shuffle, the last batch kept short), at most
``max_rows`` of them; on several ranks each rank reads and runs only its part of every batch. Each task (label
column) has its own metrics; with several tasks the top-level numbers are their means and
``task_auc``/``task_log_loss``/``task_accuracy`` list them per task. A task whose eval labels are all one class
has no AUC: None (and the mean is over the other tasks).

An eval lookup adds the keys it has not seen to the tables, with their initial rows, and trains none of them.
"""
import time

from gpuemb.autograd import backend, no_grad
from gpuemb.autograd.backend import get_array_module
from gpuemb.io.loader import Loader, LoaderConfig
from gpuemb.metrics import AUC, Accuracy, LogLoss

METRICS = {"auc": AUC, "log_loss": LogLoss, "accuracy": Accuracy}


def _result(metric):
    """The metric's value, or None where it is undefined: the AUC of eval labels that are all one class."""
    try:
        return metric.result()
    except ValueError:
        if isinstance(metric, AUC):
            return None
        raise


class OneProcess:
    """How one process evaluates: each eval batch whole through the model. ``Cluster`` is the other way: each
    rank reads its part of every eval batch, runs it, and the parts are gathered in rank order."""
    rank, world_size = 0, 1

    def eval_pad(self, batch_size):
        return 0

    def eval_start(self, model, batch, n):
        logits = model(batch.dense, batch.sparse).data
        return lambda: (logits, batch.label)


def start_gather(comm, logits, labels, n):
    """A function giving ``(logits, labels)`` of a whole eval batch of ``n`` rows from each rank's part (padding
    cut off): one allgather, of the two side by side (the labels, 0 or 1, exact in the logits' dtype). On an
    overlapped communicator it travels until the function is called, while the next batch is read and run; the
    next batch's collectives queue behind it, so every rank still makes them in one order."""
    xp = get_array_module(logits)
    both = xp.stack([logits, labels.astype(logits.dtype)], axis=-1)
    if hasattr(comm, "start"):
        pending = comm.start("allgather", both, "eval")
        return lambda: _cut(pending.wait(), n)
    done = comm.allgather(both, tag="eval")
    return lambda: _cut(done, n)


def _cut(both, n):
    return both[:n, ..., 0], both[:n, ..., 1]


def _update(metrics, gathered):
    """Add a batch's ``(logits, labels)`` to each task's metrics, which sort and count on the host: one copy of
    the two per eval batch."""
    logits, labels = (backend.to_host(a) for a in gathered)
    for t, task in enumerate(metrics):
        column = (logits, labels) if len(metrics) == 1 else (logits[:, t], labels[:, t])
        for metric in task.values():
            metric.update(*column)


def evaluate(model, source, n_tasks=1, max_rows=None, batch_size=16384, split=OneProcess()):
    """``{"rows", "auc", "log_loss", "accuracy", "eval_s", "rows_read", "bytes_read"}`` (plus per-task lists when
    ``n_tasks > 1``); what was read is this rank's (``Loader.stats``).

    ``split``: how the ranks share each eval batch. ``OneProcess()``; or on several ranks ``Cluster``, where each
    rank reads only its part of every eval batch (each short batch padded so that every rank has one: its sharded
    lookups are collective), runs it through the model, and the parts' logits and labels are gathered in rank
    order, so every rank computes the metrics of the whole eval set. ``split.eval_start(model, part, n)`` runs a
    batch and returns a function giving its gathered ``(logits, labels)``; the loop calls it after starting the
    next batch, so that on an overlapped communicator one batch's gather travels while the next one runs."""
    start = time.perf_counter()
    metrics = [{name: cls() for name, cls in METRICS.items()} for _ in range(n_tasks)]
    total = source.n_rows if max_rows is None else min(source.n_rows, max_rows)
    loader = Loader(source, LoaderConfig(batch_size, shuffle=False, drop_last=False, prefetch=2, max_rows=total,
                                         pad_to=split.eval_pad(batch_size), rank=split.rank,
                                         world_size=split.world_size))
    was_training = model.training
    rows = 0
    model.eval()
    try:
        with no_grad():
            pending = None  # the last batch's (logits, labels), gathering while this one runs
            for part in loader:
                n = min(batch_size, total - rows)  # the global batch's rows
                started = split.eval_start(model, part, n)
                if pending is not None:
                    _update(metrics, pending())
                pending, rows = started, rows + n
            if pending is not None:
                _update(metrics, pending())
    finally:
        model.train(was_training)
    out = {"rows": rows}
    for name in METRICS:
        values = [_result(task[name]) for task in metrics]
        known = [v for v in values if v is not None]
        out[name] = sum(known) / len(known) if known else None
        if n_tasks > 1:
            out[f"task_{name}"] = values
    out["eval_s"] = time.perf_counter() - start
    read = loader.stats()
    out["rows_read"], out["bytes_read"] = read["rows_read"], read["bytes_read"]
    return out
