"""The training loop and its state, in one owner: ``Loop`` steps a Run to its last step and decides, after each,
what follows it (``schedule.py``): a train record, an evaluation, a delta, a checkpoint. It owns what those
decisions read and what the records report: the schedule, the steps since the last train record (their losses,
time and counts, ``step_window.py``), the tables' levels over them (``table_stats.py``) and whether the run has
warned of a collapse. ``Run`` keeps the parts it steps: trainer, pipeline, cluster, model, deltas, checkpoints.

A checkpoint keeps the loop's window of losses (``state_dict``), so that the first train record after a resume
averages the same steps as the run that was not stopped; the records are the same, in the same order.
"""
import math

import numpy as np

from .errors import DivergedError
from .step_window import StepWindow
from .table_stats import TableWindow, hit_rate

COLLAPSED_AUC, COLLAPSED_LOG_LOSS = 0.55, 2 * math.log(2)  # an eval below the one and above the other: collapsed


class Loop:
    """The loop of a run that follows ``schedule`` (a ``schedule.Schedule``), whose steps are ``batch_size`` samples
    of this rank's, over ``tables`` (``{name: EmbeddingTable}``, this rank's)."""

    def __init__(self, schedule, batch_size, tables):
        self.schedule = schedule
        self.window = StepWindow(batch_size)  # the steps since the last train record
        self.table_window = TableWindow(tables)
        self.warned_collapse = False  # collapse_warning tells once

    def may_prepare_after(self, step):
        """Whether the step after ``step`` may prepare the batch after it: not past the end, and not across an
        evaluation, a delta or a checkpoint, which see the tables as a step leaves them (``schedule.py``)."""
        return self.schedule.may_prepare_after(step)

    def run(self, run, write, reporter, written=()):
        """Step ``run`` to its last step, telling ``reporter`` (a ``run.Reporter``) each step; ``write(record)``
        writes a record. ``written``: the records a resumed run's metrics file already holds."""
        self.warned_collapse = any(r["kind"] == "warning" for r in written)  # a resume does not say it again
        with run.pipeline as pipeline:
            while run.step < run.total_steps:
                lrs = run.trainer.lrs
                with self.window.measure():
                    try:
                        loss = pipeline.step(ahead=self.may_prepare_after(run.step))
                    except DivergedError as e:
                        raise DivergedError(f"{e}; {run.advice()}") from None
                self.window.add(loss)
                reporter.step(run, loss)
                self._after_step(run, lrs, write)

    def _after_step(self, run, lrs, write):
        """What follows the step ``run`` just took, at ``lrs``, in the schedule's order."""
        step, when = run.step, self.schedule
        last, checkpoint = when.last(step), when.checkpoints(step)
        if when.logs(step):
            write(self.train_record(run, lrs))
        if when.evaluates(step):
            record = run.eval_record()
            write(record)
            warning = self.collapse_warning(record, run.advice)
            if warning:
                write({"kind": "warning", "step": step, "message": warning})
        if when.writes_delta(step):  # before the checkpoint, which keeps the chain's state
            run.deltas.write(step, checkpoint=checkpoint)
        if checkpoint:
            write({"kind": "checkpoint", "step": step, "path": run.save_checkpoint()})
        if checkpoint or when.evaluates(step):  # their lookups are not the training's
            self.table_window.restart()
        if last and self.window:  # after the checkpoint, which keeps the window for the next record
            write(self.train_record(run, lrs))

    # -- records ---------------------------------------------------------------------------------------------------
    def train_record(self, run, lrs):
        """The mean loss of the steps since the last train record (then forgotten), their samples/s and what a step
        paid the device for (``step_window.py``), the lrs of the last step, the tables' levels over those steps,
        with ``--phase-times`` their time per phase and, over a modelled link, the steps' compute and communication
        time (``gpuemb/comm/modelled.py``)."""
        loss, samples_per_s, counts = self.window.take()
        cluster = run.cluster
        sent = {"comm_bytes_per_step": cluster.bytes_per_step()} if cluster.world_size > 1 else {}
        phases = run.trainer.timer.per_step()
        summary = getattr(cluster.comm, "step_summary", None)  # a modelled link's, overlapped or not
        link = {"link": summary()} if summary is not None else {}
        return {"kind": "train", "step": run.step, "epoch": run.pipeline.epoch, "samples": run.trainer.samples,
                "loss": loss, "lr": lrs[0], "embedding_lr": lrs[1], "samples_per_s": samples_per_s,
                **counts, **sent, **self.table_record(cluster),
                **({"phases": phases} if phases is not None else {}), **link}

    def table_record(self, cluster):
        """``{"tables": this rank's stores (table_stats.py), "hit_rate": the device caches' over the window}``.
        On several ranks each record holds its rank's own stores (rank 0's is written), and the hit rate is the
        job's: one allreduce of the caches' hits and misses, which every rank makes."""
        tables, (hits, misses, cached) = self.table_window.record()
        if cluster.world_size > 1:
            total = cluster.comm.allreduce(np.array([hits, misses, cached], np.int64), tag="stats")
            hits, misses, cached = (int(n) for n in total)
        return {"tables": tables, "hit_rate": hit_rate(hits, misses, cached)}

    def collapse_warning(self, record, advice):
        """A warning, the first time an eval shows the model collapsed: it ranks no better than chance and its
        log-loss is worse than predicting 0.5 for every row twice over, so its predictions are saturated (what a
        learning rate far too high does: the loss stays finite, so no divergence check fires). None otherwise.
        ``advice()``: what to try (``Run.advice``)."""
        auc, log_loss = record.get("auc"), record.get("log_loss")
        if self.warned_collapse or auc is None or log_loss is None or not (auc < COLLAPSED_AUC and
                                                                           log_loss > COLLAPSED_LOG_LOSS):
            return None
        self.warned_collapse = True
        return (f"the model collapsed by step {record['step']}: eval AUC {auc:.4f} is chance and log-loss "
                f"{log_loss:.4f} is over twice that of predicting 0.5 everywhere ({math.log(2):.4f}); {advice()}")

    # -- state -----------------------------------------------------------------------------------------------------
    def state_dict(self):
        """The losses of the steps since the last train record."""
        return {"window": list(self.window.losses)}

    def load_state_dict(self, state):
        self.window.losses = list(state["window"])
        self.table_window.restart()  # what restoring the rows counted is not a step's
