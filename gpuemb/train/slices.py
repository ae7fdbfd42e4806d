"""``--deterministic N``: each global batch in N fixed micro-slices, so 1, 2 or 4 ranks train the same bits.

Where W ranks rounded differently from one process, and what this does instead (W must divide N, N the batch):

- A BLAS row may round differently in a matmul of another height. The dense head runs slice by slice, forward
  and backward, so every matmul has the height G/N whatever W; each rank runs its N/W slices.
- Each rank's loss was the mean over its part, and the ranks' gradients were averaged. A slice's loss is the sum
  over its samples and its backward starts from 1/G, so a sample's gradient is the same number on every rank, and
  nothing divides it afterwards (the sharded collections' ``rank_mean`` is off).
- The dense gradients were allreduced, in an order the ranks decide. Each slice's are kept apart, gathered and
  added in slice order (``distributed.dense.SliceGradients``); the step's loss likewise. On an overlapped
  communicator the gathers start in the last slice's backward, which completes them.
- An owner sums a key's gradients in the order they arrive: peer by peer, each peer's in batch order, which is
  global sample order on any W. The lookups run once a step on the rank's part, and their backward once, on the
  slices' gradients side by side. A world of one takes the same path: its tables sharded over the local
  communicator.
- Dropout draws by (seed, step, row in the global batch): each slice is told its first row, and every slice runs
  at the step's dropout counter, which then advances once, as in a step of one process.
- Evaluation pads each eval batch to G rows (repeating its last row) and runs it through the same slices.

The learning-rate schedule and the data order never depended on W.
"""
import numpy as np

from gpuemb.autograd import Tensor, bce_with_logits, launches
from gpuemb.autograd.backend import get_array_module, to_host

from .evaluate import start_gather


class Slices:
    """The ``count`` micro-slices of a global batch of ``batch_size`` samples, and this rank's ``count / W`` of
    them: the rows ``[r G / W, (r + 1) G / W)`` of its part. ``gradients``: the model's ``SliceGradients``."""

    def __init__(self, count, batch_size, comm, gradients):
        self.count, self.batch_size, self.comm, self.gradients = count, batch_size, comm, gradients
        self.rows = batch_size // count
        self.mine = count // comm.world_size
        self.first = comm.rank * self.mine  # the index of this rank's first slice in the global batch
        self._loss = None  # the step's loss sums, gathering (overlapped)

    def starts(self):
        """``(row in this rank's part, row in the global batch)`` where each of this rank's slices starts."""
        return [(j * self.rows, (self.first + j) * self.rows) for j in range(self.mine)]

    def backward(self, model, batch, embedded, labels_of):
        """Run the head of ``model`` forward and backward on each slice of ``batch`` (this rank's part), on the
        ``embedded`` outputs of ``model.embed``; keep each slice's dense gradients apart.

        ``labels_of(logits, labels)``: the labels as the loss takes them. Returns ``(loss sums [N/W], gys)``, gys
        the gradient of each embedded output, the slices' side by side, for its backward (the lookups' updates)."""
        xp = get_array_module(embedded[0].data)
        counters = model.extra_states()
        sums, grads = [], [[] for _ in embedded]
        for j, (lo, row0) in enumerate(self.starts()):
            last = j == self.mine - 1
            model.load_extra_states(counters)  # every slice draws its dropout at the step's counter
            model.set_row0(row0)
            leaves = [Tensor(e.data[lo:lo + self.rows], requires_grad=True) for e in embedded]
            with launches.phase("interaction"):  # the head's phase, as in RecModel.forward
                logits = model.head(batch.dense[lo:lo + self.rows], *leaves)
            labels = labels_of(logits, batch.label[lo:lo + self.rows])
            with launches.phase("loss"):
                loss = bce_with_logits(logits, labels, reduction="sum")
            sums.append(loss.data)
            if last:
                self._start_loss(xp.stack(sums))
            # the last slice completes the gradients: an overlapped communicator starts their gathers in its backward
            loss.backward(xp.asarray(1 / self.batch_size, loss.dtype), on_ready=self.gradients.ready if last else None)
            self.gradients.keep()
            for g, leaf in zip(grads, leaves):
                g.append(leaf.grad if leaf.grad is not None else xp.zeros_like(leaf.data))
        self.gradients.start()
        return xp.stack(sums), [xp.concatenate(g) for g in grads]

    def _start_loss(self, sums):
        """On an overlapped communicator, start the gather of the loss ``sums`` before the last slice's backward:
        started after it, behind the gradients' gathers on the one thread, its wait (the loss's check) would wait
        for them all."""
        if hasattr(self.comm, "start"):
            self._loss = self.comm.start("allgather", to_host(sums).astype(np.float64), tag="loss")

    def loss(self, sums):
        """The global batch's mean loss from every rank's slice ``sums``, added in slice order."""
        started, self._loss = self._loss, None
        every = started.wait() if started is not None else \
            self.comm.allgather(to_host(sums).astype(np.float64), tag="loss")
        total = 0.0
        for s in every:
            total += float(s)
        return total / self.batch_size

    def eval_start(self, model, part, n):
        """An eval batch of ``n`` rows (at most G): ``part`` is this rank's rows of it padded to G rows by repeating
        its last row (the loader's ``pad_to``), run through ``model`` slice by slice; a function giving the
        ``(logits, labels)`` of the parts gathered in rank order, the padding cut off."""
        if part.rows != self.mine * self.rows or n > self.batch_size:
            raise ValueError(f"Slices.eval_start: a part of {part.rows} rows of an eval batch of {n}; evaluate in "
                             f"batches of at most {self.batch_size}, the global batch, each padded to it before "
                             f"the ranks take their parts of {self.mine * self.rows} rows")
        embedded = model.embed(part.sparse)
        with launches.phase("interaction"):
            out = [model.head(part.dense[lo:lo + self.rows], *(Tensor(e.data[lo:lo + self.rows]) for e in embedded))
                   .data for lo, _ in self.starts()]
        return start_gather(self.comm, get_array_module(out[0]).concatenate(out), part.label, n)
