"""Evaluation over a whole eval set: AUC, log-loss and accuracy, streaming, in eval mode and without a tape.

The eval rows go through the loader in file order (no shuffle, the last batch kept short), at most
``max_rows`` of them. Each task (label column) has its own metrics; with several tasks the top-level numbers
are their means and ``task_auc``/``task_log_loss``/``task_accuracy`` list them per task. A task whose eval labels
are all one class has no AUC: None (and the mean is over the other tasks).

An eval lookup adds the keys it has not seen to the tables, with their initial rows, and trains none of them.
"""
import time

from gpuemb.autograd import backend, no_grad
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


def whole_batch_logits(model, batch):
    """The logits of ``batch`` from ``model`` run on all of it: how one process evaluates."""
    return model(batch.dense, batch.sparse).data


def evaluate(model, source, n_tasks=1, max_rows=None, batch_size=16384, logits_of=whole_batch_logits):
    """``{"rows", "auc", "log_loss", "accuracy", "eval_s"}`` (plus per-task lists when ``n_tasks > 1``).

    ``logits_of(model, batch)``: the batch's logits; on several ranks ``Cluster.logits``, where each rank runs its
    part of every eval batch through the model (every rank calls the sharded lookups, which are collective) and
    the parts' logits are gathered in rank order, so every rank computes the metrics of the whole eval set."""
    start = time.perf_counter()
    metrics = [{name: cls() for name, cls in METRICS.items()} for _ in range(n_tasks)]
    loader = Loader(source, LoaderConfig(batch_size, shuffle=False, drop_last=False, prefetch=2))
    was_training = model.training
    rows = 0
    model.eval()
    try:
        with no_grad():
            for batch in loader:
                take = batch.rows if max_rows is None else min(batch.rows, max_rows - rows)
                # the metrics sort and count on the host: one copy of the logits and labels per eval batch
                logits = backend.to_host(logits_of(model, batch.slice(0, take)))
                labels = backend.to_host(batch.label[:take])
                for t, task in enumerate(metrics):
                    column = (logits, labels) if n_tasks == 1 else (logits[:, t], labels[:, t])
                    for metric in task.values():
                        metric.update(*column)
                rows += take
                if rows == max_rows:
                    break
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
    return out
