"""A training run from a TrainConfig: data, model and optimizer, the loop, evaluation, metrics, checkpoints.

``train(config)`` runs it to the end and returns a summary; a :class:`Reporter` hears each step and record on
the way (``tools/train.py`` draws its progress bar with one). :class:`Run` holds the parts, so a test can
step one, save it, and resume another; its ``loop`` (``training_loop.py``) steps it and owns the loop's state.
What a step does and how it prepares the next batch are chosen once, from the flags (``strategy.py``).
"""
import math
import os
import tempfile
import time

from gpuemb.autograd import backend
from gpuemb.io.loader import Loader, LoaderConfig

from . import checkpoint as ckpt
from . import checkpoint_dir
from . import recipes
from .cluster import Cluster
from .config import check_precision, flatten
from .data import open_data, uses_synthetic
from .errors import CheckpointError, ConfigError, DivergedError, ResumeError
from .evaluate import evaluate
from .footprint import memory
from .loop import Batches, Pipeline, Trainer, non_finite
from .metrics_log import MetricsLog
from .model import build_model, embedding_tables
from .optimizer import build_optimizer
from .phases import NO_TIMER, PhaseTimer
from .schedule import Schedule
from .strategy import choose
from .training_loop import Loop

BATCH_SIZE = 4096  # the default; small data gets at most a tenth of its training rows
SYNTHETIC_ROWS = 1 << 22  # synthetic training rows unless --train-rows says; not from --steps, so a resume fits
MIN_STEPS = 100  # the default run on small files: one epoch, but at least this many steps


class Reporter:
    """What a run tells its caller as it goes. This one tells nothing; subclass it to show progress."""

    def start(self, run):
        """Called once the run is built (and resumed), before the first step."""

    def step(self, run, loss):
        """Called after every step with its loss."""

    def record(self, record):
        """Called with each metrics record as it is written."""

    def close(self):
        """Called when the run ends, normally or not."""


class Run:
    """The parts of a run of ``config``; ``close()`` releases its files and temporary folders.

    With ``--resume``, the checkpoint's manifest and config are checked first, before anything is built, and
    ``resume()`` then loads it. ``data``: a ``DataSet`` to train on instead of the config's (a benchmark's).
    ``comm``: the job's communicator when the run is one rank of several (``gpuemb.comm.init()``); none is a
    world of one.
    """

    def __init__(self, config, data=None, comm=None):
        # the model's recipe fills what the flags left unset, before anything (a resume's check included) reads it
        config = recipes.apply(config, uses_synthetic(config) if data is None else data.synthetic)
        check_precision(config.optimization.precision, backend.DEVICE)  # before building anything
        self.config, self.checkpoint, self.cluster = config, None, Cluster.of(comm, config)
        self.strategy = choose(config, self.cluster.world_size)  # the step's kind and how it prepares the next
        self._lock = self._claim_checkpoint_dir()
        c = config.checkpoints
        try:
            if c.resume:
                warn = ckpt._warn if self.cluster.lead else lambda line: None
                folder, body = ckpt.find_resume(c.checkpoint_dir if c.resume == "latest" else c.resume, warn)
                ckpt.check_config(body, config, folder)
                self.checkpoint, self.manifest = (folder, flatten(body["config"])), body
        except BaseException:
            self._lock.release()
            raise
        self._tmp = tempfile.TemporaryDirectory(prefix="gpuemb-train-")
        try:
            self._build(config, data)
        except BaseException:
            self.close()
            raise

    def _claim_checkpoint_dir(self):
        """Rank 0 locks ``--checkpoint-dir`` for this run and clears what dead runs left there; every rank raises
        if that fails (another run holds it)."""
        directory, lock, error = self.config.checkpoints.checkpoint_dir, checkpoint_dir.DirLock(None), None
        if directory and self.cluster.lead:
            try:
                lock = checkpoint_dir.DirLock(directory)
                checkpoint_dir.clear_leftovers(directory)
            except (CheckpointError, OSError) as e:
                lock.release()
                error = e if isinstance(e, CheckpointError) else CheckpointError(
                    f"--checkpoint-dir {directory}: cannot be prepared ({e}); pass a writable folder")
        if directory and not self.cluster.everywhere(error is None):
            raise error or CheckpointError(f"--checkpoint-dir {directory}: rank 0 could not take it for this run "
                                           "(its error says why)")
        return lock

    def _build(self, config, data):
        batch = config.optimization.batch_size or BATCH_SIZE
        self.data = data or open_data(config, self._tmp.name, config.data.train_rows or SYNTHETIC_ROWS)
        if config.optimization.batch_size is None and not self.data.synthetic:
            batch = max(1, min(batch, self.data.train.n_rows // 10))
        self.batch_size = batch
        self.cluster.check_batch(batch)
        self.loader = Loader(self.data.train, LoaderConfig(batch, shuffle=True, seed=config.run.seed,
                                                           rank=self.cluster.rank, world_size=self.cluster.world_size))
        self.batches = Batches(self.loader)
        per_epoch = len(self.loader)
        if config.optimization.steps:
            self.total_steps = config.optimization.steps
        elif config.optimization.epochs:
            self.total_steps = config.optimization.epochs * per_epoch
        else:
            self.total_steps = recipes.STEPS if self.data.synthetic else max(per_epoch, MIN_STEPS)
        ssd_dir = None
        if config.store.placement == "ssd":
            ssd_dir = config.store.ssd_dir or os.path.join(self._tmp.name, "ssd")
            if self.cluster.world_size > 1:  # ranks on one host must not share a file
                ssd_dir = os.path.join(ssd_dir, f"rank{self.cluster.rank}")
            try:
                os.makedirs(ssd_dir, exist_ok=True)
                tempfile.TemporaryFile(dir=ssd_dir).close()  # a read-only folder or disk: now, not at the first slab
            except OSError as e:
                why = "a file of that name is there" if isinstance(e, FileExistsError) else e.strerror or e
                raise ConfigError(f"--ssd-dir {ssd_dir}: the tables' files cannot be written there ({why}); pass "
                                  "a folder this user can write") from None
        # A resume may change the learning rates, but a table is restored into the config it was saved with;
        # the trainer sets the tables' lr at every step anyway.
        saved_lr = self.checkpoint[1]["embedding_lr"] if self.checkpoint else config.optimization.embedding_lr
        try:
            self.model = build_model(config, self.data, ssd_dir, saved_lr)
        except MemoryError as e:  # numpy's and CuPy's say the size they could not have
            c = config.model
            dims = f"--embedding-dim {c.embedding_dim}" + (", --table-dim" if c.table_dims else "")
            raise ConfigError(f"the model does not fit in memory: building it ran out ({e or 'no size given'}); "
                              f"lower {dims} or the layers' widths (--model-arg), or put the tables' rows on the "
                              "host or SSD (--store host, --store ssd)") from None
        self.cluster.shard(self.model, batch)
        self.tables = embedding_tables(self.model)
        self.optimizer = build_optimizer(config, self.model, self.total_steps)
        self.trainer = Trainer(self.model, self.optimizer, self.tables, config.optimization.lr,
                               config.optimization.embedding_lr, self.cluster, self.strategy.build_step(self.cluster),
                               PhaseTimer() if config.output.phase_times else NO_TIMER)
        self.deltas, d = None, config.checkpoints
        if d.delta_every:  # its graphs need onnx (the serve extra): imported only by a run that writes deltas
            from .deltas import DeltaWriter
            self.deltas = DeltaWriter(d.delta_dir, d.delta_every, self.model, self.tables, self.cluster)
        self.pipeline = Pipeline(self.trainer, self.batches, self.strategy.build_ahead(self.model))
        self.eval_every = config.output.eval_every or max(1, self.total_steps // 4)
        c = config.checkpoints
        self.loop = Loop(Schedule(self.total_steps, config.output.log_every, self.eval_every, bool(c.checkpoint_dir),
                                  c.checkpoint_every or 0, self.deltas), self.batch_size, self.tables)
        self.last_checkpoint = None

    @property
    def step(self):
        return self.trainer.step

    def memory(self):
        """What this rank's tables and its step's activations take (``footprint.memory``): ``{"tables": {tier:
        bytes}, "tables_grow", "activations", "batch", "line"}``, ``line`` one line for the run's first ones."""
        return memory(self.model, self.tables, self.batch_size // self.cluster.world_size)

    # -- state -----------------------------------------------------------------------------------------------------
    def state_dict(self):
        """Everything but the tables' rows: the trainer's state, the loader's position, the loop's loss window."""
        return {"trainer": self.trainer.state_dict(), "loader": self.pipeline.state_dict(),
                "loop": {**self.loop.state_dict(), **({"deltas": self.deltas.state_dict()} if self.deltas else {})}}

    def save_checkpoint(self):
        """Write a checkpoint of this step to ``--checkpoint-dir``; refuses weights or rows that are not finite."""
        bad = non_finite(self.model)
        if bad:
            raise DivergedError(f"after step {self.step} the dense parameter {bad} holds NaN or inf, so no "
                                f"checkpoint was written; {self.advice()}")
        c = self.config
        try:
            path = ckpt.save_checkpoint(c.checkpoints.checkpoint_dir, self.step, c, self.state_dict(), self.model,
                                        self.cluster, c.checkpoints.keep_checkpoints, self.data)
        except DivergedError as e:
            raise DivergedError(f"after step {self.step} {e}, so no checkpoint was written; {self.advice()}") from None
        self.last_checkpoint = path
        return path

    def resume(self):
        """Restore the checkpoint that ``--resume`` names: tables, weights, optimizer, positions."""
        folder, saved = self.checkpoint
        state = ckpt.read_state(folder)
        if state["trainer"]["step"] > self.total_steps:
            raise ConfigError(f"--steps: the checkpoint {folder} is at step {state['trainer']['step']}, past the "
                              f"{self.total_steps} steps asked for; --steps counts every step, so ask for more")
        ckpt.restore_tables(folder, self.manifest, self.model)
        if saved["lr"] != self.config.optimization.lr:  # the schedule starts from the new --lr
            del state["trainer"]["optimizer"]["schedule"]
        try:
            self.trainer.load_state_dict(state["trainer"])
        except ValueError as e:  # the schedule's settings: its length follows --steps
            raise ResumeError(f"--resume {folder}: {e}. A schedule that decays to the last step changes with "
                              "--steps: pin its length with --decay-steps") from None
        except (TypeError, KeyError, AttributeError, IndexError) as e:  # a state.h5 that checks out but is not ours
            raise CheckpointError(f"{os.path.join(folder, ckpt.STATE)}: its trainer state does not fit this run "
                                  f"({type(e).__name__}: {e}); resume from another checkpoint") from None
        try:
            self.batches.load_state_dict(state["loader"])
        except ValueError as e:
            raise ResumeError(f"--resume {folder}: {e}") from None
        except (TypeError, KeyError, AttributeError, IndexError) as e:
            raise CheckpointError(f"{os.path.join(folder, ckpt.STATE)}: its loader position does not fit this run "
                                  f"({type(e).__name__}: {e}); resume from another checkpoint") from None
        if self.deltas:
            self.deltas.load_state_dict(state["loop"].get("deltas"))
        self.last_checkpoint = folder
        self.loop.load_state_dict(state["loop"])
        return folder

    def advice(self):
        """What to try after a divergence, and where the last good checkpoint is."""
        c = self.config
        where = (f"the last good checkpoint is {self.last_checkpoint}: continue from it with the change and "
                 f"--resume {self.last_checkpoint}" if self.last_checkpoint else
                 "no checkpoint was written yet (--checkpoint-dir with --checkpoint-every keeps some)")
        return (f"try a lower --lr (now {c.optimization.lr:g}) "
                f"or --embedding-lr (now {c.optimization.embedding_lr:g}), or a warmup "
                f"(--schedule warmup_poly --warmup-steps 200); {where}")

    # -- records ---------------------------------------------------------------------------------------------------
    def eval_record(self):
        # Eval batches of the training size: a cached table holds the unique keys of one batch, not more.
        try:
            result = evaluate(self.model, self.data.eval, self.data.n_tasks, self.config.data.eval_rows,
                              self.batch_size, self.cluster)
        except ValueError as e:  # the metrics refuse NaN or infinite logits
            raise DivergedError(f"the evaluation after step {self.step} failed: {e}; {self.advice()}") from None
        record = {"kind": "eval", "step": self.step, "epoch": self.pipeline.epoch, "samples": self.trainer.samples,
                  **result}
        if self.data.teacher_auc is not None:
            record["teacher_auc"] = self.data.teacher_auc
        return record

    def close(self):
        drain = getattr(self.cluster.comm, "drain", None) if hasattr(self, "cluster") else None
        if drain is not None:  # an overlapped key exchange still in flight ends before the communicator does
            drain()
        self._lock.release()
        for table in self.tables.values() if hasattr(self, "tables") else ():
            table.close()
        if hasattr(self, "data"):
            self.data.close()
        self._tmp.cleanup()


def train(config, reporter=None, comm=None):
    """Train as ``config`` says, to its last step; returns a summary dict (see ``summarize``). ``comm``: the job's
    communicator when this is one rank of several, where only rank 0 writes the metrics file and the plot."""
    reporter = reporter or Reporter()
    run = Run(config, comm=comm)
    cluster = run.cluster
    lead = cluster.lead
    try:
        if config.checkpoints.resume:
            run.resume()
        if run.deltas:
            run.deltas.begin(run.step)
        log = MetricsLog(config.output.metrics_out if lead else None, run.step if config.checkpoints.resume else None)

        def write(record):
            log.write(record)
            reporter.record(record)

        reporter.start(run)
        first, start = run.step, time.perf_counter()
        run.loop.run(run, write, reporter, log.records)
        seconds = time.perf_counter() - start
        evals = [r for r in log.records if r["kind"] == "eval"]
        again = not evals or evals[-1]["step"] != run.step  # resumed at the last step: evaluate what was loaded
        again = cluster.lead_says(again)  # only rank 0 read the records of the run that wrote the checkpoint
        if again:
            write(run.eval_record())
            evals.append(log.records[-1])
        if config.output.plot and lead:
            from .plot import plot_metrics
            plot_metrics(log.records, config.output.plot)
        return summarize(run, evals[-1] if evals else None, run.step - first, seconds)
    finally:
        reporter.close()
        run.close()


def summarize(run, final, steps, seconds):
    """``{"steps", "samples", "seconds", "samples_per_s", "eval", "teacher_auc", "checkpoint", "device", "data"}``,
    and on several ranks ``"ranks"`` and ``"comm_bytes_per_step"`` (``{tag: bytes}``, all ranks together). ``eval``
    is the last eval record (None on a rank other than 0 resumed at its last step: rank 0 alone read it)."""
    samples = steps * run.batch_size
    return {"steps": run.step, "steps_this_run": steps, "samples": run.trainer.samples, "seconds": seconds,
            "samples_per_s": samples / seconds if seconds > 0 else math.nan, "eval": final,
            "teacher_auc": run.data.teacher_auc, "checkpoint": run.last_checkpoint, "device": backend.DEVICE,
            "data": run.data.description,
            **({"ranks": run.cluster.world_size, "comm_bytes_per_step": run.cluster.bytes_per_step(whole_run=True)}
               if run.cluster.world_size > 1 else {})}
