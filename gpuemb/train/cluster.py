"""This process's place in a job: ``Cluster``, a world of W ranks, W = 1 for a plain run.

Under ``mpiexec -n W python tools/train.py ...`` (docs/distributed.md, "tools/train.py") every rank builds the same
model from the same seed; ``Cluster.shard`` then swaps in the sharded embedding collections
(``gpuemb.distributed.distribute``: model-parallel tables, dense parameters broadcast from rank 0) and keeps the
dense gradients' allreduce, which the trainer runs between the backward and the optimizer step. A world of one
keeps its tables whole: its collections need no routing, and they prefetch the next batch's rows.

Each rank's loader (``gpuemb.io.loader``, given the rank) reads and yields only the rank's part of every global
batch of ``--batch-size`` rows, rows ``[r G / W, (r + 1) G / W)``, so W ranks see exactly the data one process
sees, and the loader's position (a checkpoint's) is that of the global batches whatever the world size.
Evaluation reads each eval batch by the same rule, each short one padded so that every rank has a part, and gathers
the logits and labels, so the metrics are those of the whole eval set. In a world of one every collective is the
local communicator's: the part is the whole batch, a mean is the value itself.

``--plan PLAN.json`` replaces the planner by a plan that ``tools/plan.py --json`` wrote for the launch's ranks (one
rank included: a run of one process then shards its tables too), placing exactly the model's tables, those of every
collection; ``sharding.plan.load_plan`` refuses any other in one line.

With ``--deterministic N`` (``slices.py``) every world size, one included, shards its tables, and the step runs in
N micro-slices whose gradients are added in slice order, so 1, 2 or 4 ranks train the same bits.
"""
import os
import uuid
from collections import Counter

import numpy as np

from gpuemb.comm import CommCodecs, LocalCommunicator, OverlappedCommunicator
from gpuemb.distributed import ShardedEmbeddingCollection, distribute
from gpuemb.distributed.column import coupled_groups
from gpuemb.distributed.dense import SliceGradients
from gpuemb.sharding.plan import load_plan
from gpuemb.store.collection import EmbeddingCollection

from .errors import CheckpointError, ConfigError
from .evaluate import start_gather
from .model import collections_of
from .slices import Slices

# what a step sends, reported per step: the embeddings' all-to-alls and gathers, and the dense allreduce
TAGS = ("a2a_keys", "a2a_fwd", "a2a_bwd", "column_sums", "dp_allgather", "allreduce")


def keeps_tables_whole(config, world_size):
    """Whether a run of ``config`` on ``world_size`` ranks keeps its tables whole, unsharded (``Cluster.shard``)."""
    return world_size == 1 and not config.run.deterministic and config.distributed.plan is None


def overlaps(config, world_size):
    """Whether a run of ``config`` on ``world_size`` ranks runs its collectives on a thread of their own."""
    return world_size > 1 and config.distributed.overlap_comm


class Cluster:
    """This process's place in a job of W ranks (W = 1: a plain run), and the collectives a run makes beside the
    model's own."""

    def __init__(self, comm, config):
        self.comm, self.rank, self.world_size = comm, comm.rank, comm.world_size
        d = config.distributed
        self.codecs = CommCodecs(d.comm_codec, d.comm_codec_backward or d.comm_codec)
        self.sharding, self.plan_file, self.plan, self._dense = d.sharding, d.plan, None, None
        self.plan_out, self.dedup = d.plan_out, d.dedup_keys
        self.precision = config.optimization.precision
        self.tables_whole = keeps_tables_whole(config, self.world_size)
        if self.plan_out and self.tables_whole:
            raise ConfigError(f"--plan-out {self.plan_out}: a run of one process keeps its tables whole, so it has no "
                              "plan to write; plan one with tools/plan.py --world-size 1 --json, or launch several "
                              "ranks")
        self.deterministic, self.slices = config.run.deterministic, None  # N micro-slices; Slices once sharded
        if self.deterministic and self.dedup:
            raise ConfigError("--deterministic: --dedup-keys adds each rank's gradients of a key before they travel, "
                              "so a row's update rounds by the number of ranks; leave --dedup-keys off for runs that "
                              "are the same bits on any number of ranks")
        if self.deterministic and self.precision == "fp16":
            raise ConfigError("--deterministic: --precision fp16 scales the loss and skips steps by what overflowed; "
                              "train in fp32 or bf16 for runs that are the same bits on any number of ranks")
        self._window, self._run = Counter(), Counter()  # bytes sent in train steps: since the last record, in all
        self.collections = []  # the model's sharded collections, once sharded
        self._steps = [0, 0]

    @classmethod
    def of(cls, comm, config):
        """A Cluster on ``comm`` (``gpuemb.comm.init()``); no communicator is a world of one. ``--overlap-comm``
        runs a world of several's collectives on a thread of their own (``comm/overlap.py``)."""
        if comm is not None and overlaps(config, comm.world_size):
            comm = OverlappedCommunicator(comm)
        return cls(comm or LocalCommunicator(), config)

    @property
    def grad_ready(self):
        """``loss.backward(on_ready=)``'s hook: the dense allreduce's, which starts buckets on an overlapped
        communicator; None where there is no allreduce in buckets."""
        return getattr(self._dense, "ready", None)

    @property
    def lead(self):
        """Whether this is rank 0, the one that prints and writes the run's files."""
        return self.rank == 0

    def describe(self):
        """One line: the ranks, the codecs and where the tables went."""
        if self.plan is None:
            return f"{self.world_size} rank ({self.comm.name}); tables whole"
        kinds = Counter()
        for p in self.plan.placements:
            where = f"on rank {p.shards[0].rank}" if p.kind == "table" else f"over {len(p.shards)} ranks"
            kinds[f"{p.kind.replace('_', '-')}-wise {where}" if p.kind != "data" else "replicated"] += 1
        placed = ", ".join(f"{n} {k}" for k, n in kinds.items())
        source = f" (--plan {self.plan_file})" if self.plan_file else ""
        return (f"{self.world_size} ranks ({self.comm.name}); all-to-alls {self.codecs.forward} forward, "
                f"{self.codecs.backward} backward{', keys deduplicated' if self.dedup else ''}; tables{source}: "
                f"{placed}")

    # -- building -------------------------------------------------------------------------------------------------
    def check_batch(self, batch_size):
        """ConfigError unless the global batch splits evenly: the gradient scaling assumes equal parts."""
        if batch_size % self.world_size:
            raise ConfigError(f"--batch-size: {batch_size} samples do not split evenly over {self.world_size} "
                              f"ranks; use a multiple of {self.world_size} (each rank trains on its "
                              f"1/{self.world_size} of every batch)")
        N = self.deterministic
        if N and N % self.world_size:
            raise ConfigError(f"--deterministic: {N} micro-slices do not split over {self.world_size} ranks; use a "
                              f"multiple of {self.world_size} (each rank trains whole slices)")
        if N and batch_size % N:
            raise ConfigError(f"--batch-size: {batch_size} samples do not split into the {N} micro-slices of "
                              f"--deterministic; use a multiple of {N}")

    def shard(self, model, batch_size):
        """Shard ``model``'s tables over the ranks, as ``--plan`` or else ``--sharding`` says, and broadcast its dense
        parameters; a world of one keeps the model as it is, unless ``--deterministic`` or ``--plan``."""
        if self.tables_whole:
            return model
        source = f"--plan {self.plan_file}" if self.plan_file else f"--sharding {self.sharding}"
        plan = self._read_plan(model)
        try:
            self._dense = distribute(model, self.comm, plan, codecs=self.codecs, dedup=self.dedup,
                                     batch_size=batch_size, codec=self.codecs.forward, sharding=self.sharding)
        except ValueError as e:  # the planner's PlanError, or a plan that does not fit a table: each says what to do
            raise ConfigError(f"{source}: {e}") from None
        self.collections = collections = [c for _, c in collections_of(model, ShardedEmbeddingCollection)]
        self.plan = collections[0].plan
        if self.plan_out:
            self._write_plan()
        if self.deterministic:
            self._deterministic(model, collections, batch_size)
        # dropout draws by a row's index in the global batch: with this rank's offset, the ranks together draw the
        # masks one process draws (the training loader drops short batches, so every batch splits at these rows)
        model.set_row0(self.rank * batch_size // self.world_size)
        return model

    def _write_plan(self):
        """Rank 0 writes the plan to ``--plan-out`` whole (a temporary file, then renamed); if it cannot, every rank
        stops with one line."""
        error = None
        if self.lead:
            tmp = f"{self.plan_out}.tmp-{uuid.uuid4().hex[:8]}"
            try:
                with open(tmp, "w", encoding="utf-8") as f:
                    f.write(self.plan.to_json())
                os.replace(tmp, self.plan_out)
            except OSError as e:
                error = (f"--plan-out {self.plan_out}: cannot write it ({e.strerror or e}); give a file in a folder "
                         "that exists and can be written")
                if os.path.exists(tmp):
                    os.remove(tmp)
        if not self.everywhere(error is None):
            raise ConfigError(error or f"--plan-out {self.plan_out}: rank 0 could not write it (its error says why)")

    def _read_plan(self, model):
        """``--plan``'s plan, checked for this world and the tables of all the model's collections; None without
        the flag (the planner's)."""
        if self.plan_file is None:
            return None
        tables = [t.config for _, c in collections_of(model, EmbeddingCollection) for t in c.tables]
        try:
            plan = load_plan(self.plan_file, self.world_size, tables, world="mpiexec -n")
        except ValueError as e:  # it names the file and says what to do
            raise ConfigError(str(e)) from None
        coupled = [t.name for t in tables if coupled_groups(plan.placement(t.name), t)]
        if self.precision == "fp16" and coupled:  # what the config refuses of --sharding column
            raise ConfigError(f"--plan {self.plan_file}: table {coupled[0]} is split by columns under "
                              "rowwise_adagrad, whose shards exchange their squared-gradient sums during the "
                              "backward, which a loss-scaled fp16 step holds back; place it table- or row-wise, or "
                              "use another --embedding-optimizer")
        return plan

    def _deterministic(self, model, collections, batch_size):
        """Step in ``--deterministic``'s slices: undivided row gradients, dense gradients added in slice order."""
        for c in collections:
            if c.coupled:
                raise ConfigError(f"--deterministic: table {c.coupled[0][0]} is split by columns under "
                                  "rowwise_adagrad, whose shards add their squared-gradient sums in rank order; use "
                                  "--sharding table or row, or another --embedding-optimizer")
            if c.hotness is not None and c.partial_sums():
                raise ConfigError(f"--deterministic: table {c.partial_sums()[0]} is split by rows and pools its "
                                  f"multi-hot features by {c.mode}, whose partial sums round by the number of ranks; "
                                  "use --sharding table or column")
            c.rank_mean = False  # the slices' losses are already the global batch's
            c.same_bits = True
        self._dense = SliceGradients(model.parameters(), self.comm)
        self.slices = Slices(self.deterministic, batch_size, self.comm, self._dense)

    # -- collectives of a step ------------------------------------------------------------------------------------
    def allreduce(self):
        """Average the dense gradients over the ranks (between the backward and the optimizer step)."""
        if self._dense is not None:
            self._dense()

    def settle(self):
        """Apply the row updates held for their gradients' all-to-all (``distributed/row_updates.py``): at the step's
        end, so the step's time and bytes include them, in the same order on every rank."""
        for c in self.collections:
            c.settle()

    def mean(self, value):
        """The mean of a float over the ranks (the global batch's loss from the ranks' equal parts)."""
        return self.start_mean(value)()

    @property
    def overlapped(self):
        """Whether the collectives run on a thread of their own (``--overlap-comm`` on several ranks), so that a
        sharded lookup's row updates wait for ``settle()`` (distributed/row_updates.py)."""
        return hasattr(self.comm, "start")

    def start_mean(self, value):
        """``mean(value)`` started: a function that waits for it and returns it. On an overlapped communicator it
        travels while the caller computes; otherwise it is done before this returns."""
        x, w = np.array([value], np.float64), self.world_size
        if not self.overlapped:
            total = float(self.comm.allreduce(x, tag="loss")[0]) / w
            return lambda: total
        pending = self.comm.start("allreduce", x, "sum", "loss")
        return lambda: float(pending.wait()[0]) / w

    def everywhere(self, ok):
        """Whether ``ok`` holds on every rank."""
        return int(self.comm.allreduce(np.array([not ok], np.int64), tag="agree")[0]) == 0

    def lead_says(self, flag):
        """Rank 0's ``flag``, on every rank (a choice only rank 0 can make, e.g. from the metrics file it read)."""
        return bool(self.comm.broadcast(np.array([flag], np.int64), root=0, tag="agree")[0])

    # -- evaluation -------------------------------------------------------------------------------------------------
    def eval_pad(self, batch_size):
        """Rows each short eval batch is padded to (repeating its last row) before the ranks take their parts: the
        global batch under ``--deterministic``, whose slices are the step's; else one a rank, so that every rank
        runs, and so joins the sharded lookups' collectives of, every eval batch."""
        return batch_size if self.slices is not None else self.world_size if self.world_size > 1 else 0

    def eval_start(self, model, part, n):
        """This rank's ``part`` of an eval batch of ``n`` rows (the loader's, padded by ``eval_pad``) through
        ``model``; a function giving the whole batch's ``(logits, labels)``, gathered in rank order
        (``evaluate.start_gather``)."""
        if self.slices is not None:
            return self.slices.eval_start(model, part, n)
        return start_gather(self.comm, model(part.dense, part.sparse).data, part.label, n)

    # -- bytes per step -------------------------------------------------------------------------------------------
    def begin_step(self):
        """Forget what was sent since the last step (an evaluation's or a checkpoint's traffic is not a step's)."""
        self.comm.reset_bytes()

    def end_step(self):
        sent = self.comm.reset_bytes()
        self._window.update(sent)
        self._run.update(sent)
        self._steps = [self._steps[0] + 1, self._steps[1] + 1]

    def bytes_per_step(self, whole_run=False):
        """``{tag: bytes}`` sent per step by all ranks together, over the steps since the last call (or of the
        whole run), then those start over; every rank must call it."""
        sent, steps = (self._run, self._steps[1]) if whole_run else (self._window, self._steps[0])
        total = self.comm.allreduce(np.array([sent.get(t, 0) for t in TAGS], np.int64), tag="stats")
        if not whole_run:
            self._window, self._steps[0] = Counter(), 0
        return {t: round(int(v) / max(steps, 1)) for t, v in zip(TAGS, total)}

    # -- checkpoints ----------------------------------------------------------------------------------------------
    def new_folder(self, directory, step, folder_names):
        """Rank 0 makes the temporary folder of a checkpoint of ``step``; every rank gets its path, or every rank
        raises. ``folder_names(directory, step, token)``: ``(name, final, tmp)``."""
        token, error = np.zeros(5, np.uint8), None
        if self.rank == 0:
            try:
                os.makedirs(directory, exist_ok=True)
                token[1:] = np.frombuffer(uuid.uuid4().bytes[:4], np.uint8)
                os.mkdir(folder_names(directory, step, token[1:].tobytes().hex())[2])
                token[0] = 1
            except OSError as e:
                error = e
        token = self.comm.broadcast(token, root=0, tag="checkpoint")
        if error is not None:
            raise CheckpointError(f"--checkpoint-dir {directory}: cannot be written ({error})")
        if not token[0]:
            raise CheckpointError(f"--checkpoint-dir {directory}: rank 0 could not make the checkpoint's folder "
                                  "there (its error says why)")
        return folder_names(directory, step, token[1:].tobytes().hex())
