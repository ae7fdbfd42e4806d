"""Evaluation over a whole eval set: AUC, log-loss and accuracy, streaming, in eval mode and without a tape.

The eval rows go through the loader in file order (no shuffle, the last batch kept short), at most
``max_rows`` of them. Each task (label column) has its own metrics; with several tasks the top-level numbers
are their means and ``task_auc``/``task_log_loss``/``task_accuracy`` list them per task.

An eval lookup adds the keys it has not seen to the tables, with their initial rows, and trains none of them.
"""
import time

from gpuemb.autograd import no_grad
from gpuemb.io.loader import Loader, LoaderConfig
from gpuemb.metrics import AUC, Accuracy, LogLoss

METRICS = {"auc": AUC, "log_loss": LogLoss, "accuracy": Accuracy}


def evaluate(model, source, n_tasks=1, max_rows=None, batch_size=16384):
    """``{"rows", "auc", "log_loss", "accuracy", "eval_s"}`` (plus per-task lists when ``n_tasks > 1``)."""
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
                logits = model(batch.dense[:take], batch.sparse[:take]).data
                labels = batch.label[:take]
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
        values = [task[name].result() for task in metrics]
        out[name] = sum(values) / n_tasks
        if n_tasks > 1:
            out[f"task_{name}"] = values
    out["eval_s"] = time.perf_counter() - start
    return out
