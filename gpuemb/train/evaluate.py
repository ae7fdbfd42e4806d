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

    def eval_logits(self, model, batch, n):
        return model(batch.dense, batch.sparse).data, batch.label


def gathered(comm, logits, labels, n):
    """``(logits, labels)`` of a whole eval batch of ``n`` rows from each rank's part (padding cut off): one
    allgather, of the two side by side (the labels, 0 or 1, exact in the logits' dtype)."""
    xp = get_array_module(logits)
    both = comm.allgather(xp.stack([logits, labels.astype(logits.dtype)], axis=-1), tag="eval")
    return both[:n, ..., 0], both[:n, ..., 1]


def evaluate(model, source, n_tasks=1, max_rows=None, batch_size=16384, split=OneProcess()):
    """``{"rows", "auc", "log_loss", "accuracy", "eval_s", "rows_read", "bytes_read"}`` (plus per-task lists when
    ``n_tasks > 1``); what was read is this rank's (``Loader.stats``).

    ``split``: how the ranks share each eval batch. ``OneProcess()``; or on several ranks ``Cluster``, where each
    rank reads only its part of every eval batch (each short batch padded so that every rank has one: its sharded
    lookups are collective), runs it through the model, and the parts' logits and labels are gathered in rank
    order, so every rank computes the metrics of the whole eval set."""
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
            for part in loader:
                n = min(batch_size, total - rows)  # the global batch's rows
                # the metrics sort and count on the host: one copy of the logits and labels per eval batch
                logits, labels = (backend.to_host(a) for a in split.eval_logits(model, part, n))
                for t, task in enumerate(metrics):
                    column = (logits, labels) if n_tasks == 1 else (logits[:, t], labels[:, t])
                    for metric in task.values():
                        metric.update(*column)
                rows += n
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
