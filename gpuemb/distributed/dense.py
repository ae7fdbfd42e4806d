"""Data-parallel dense parameters: the same initial values on every rank, and gradients averaged over ranks.

``broadcast_parameters`` copies rank 0's values into every rank's parameters once, before training.
``GradientAllreduce`` is called each step between ``loss.backward()`` and ``optimizer.step()``: it packs the
gradients into buckets of about ``bucket_bytes`` (by default a quarter of the parameters, at most 4 MiB:
``default_bucket_bytes``), one allreduce per bucket (fewer, larger messages than one per parameter), and divides
by the world size, since each rank's loss is the mean over its own part of the batch.
On an ``OverlappedCommunicator`` its ``ready`` hook, passed to ``loss.backward(on_ready=)``, starts each bucket's
allreduce as soon as the backward has completed its gradients, and the call waits for them: the same allreduces
of the same vectors, so the same bits, with the communication hidden behind the rest of the backward.

Each bucket also carries, per parameter, 1 where this rank has a gradient: a parameter no rank has a gradient
for keeps ``grad = None`` (so the optimizer skips it, as it would on one rank); one that only some ranks have a
gradient for gets the sum of theirs (zeros for the others) over the world size.

``SliceGradients`` replaces the allreduce under ``--deterministic`` (``gpuemb/train/slices.py``): it adds the
gradients of the batch's micro-slices in slice order, so the sum does not depend on the world size. On an
overlapped communicator it gathers them in the same buckets (``buckets_of``), each started by the last slice's
backward; on a blocking one, in one gather.
"""
from gpuemb.autograd.backend import get_array_module, to_host
from gpuemb.comm import traffic


def broadcast_parameters(params, comm, root=0):
    """Set every parameter (an iterable of Tensors) to rank ``root``'s values, in place."""
    for p in params:
        p.data[...] = comm.broadcast(p.data, root=root)


class Buckets:
    """The gradients of ``params`` in buckets (``buckets_of``), each started on ``comm`` as the backward completes it.

    ``ready`` is ``backward(on_ready=)``'s hook: ``leaf``'s gradient is complete. On an overlapped communicator
    (``comm.start``), a bucket whose gradients are all complete starts its collective (``_start``) while the
    backward goes on; elsewhere nothing happens until the call. They start in reverse order, the last layers'
    first, each only after the one before it, so every rank starts them in the same order."""

    def __init__(self, params, comm, bucket_bytes=None):
        self.params, self.comm = list(params), comm
        self.buckets = buckets_of(self.params, bucket_bytes)
        self._bucket_of = {id(self.params[i]): b for b, bucket in enumerate(self.buckets) for i in bucket}
        self._reset()

    def _reset(self):
        self._left = [len(b) for b in self.buckets]
        self._started, self._next = {}, len(self.buckets) - 1

    def _params(self, b):
        return [self.params[i] for i in self.buckets[b]]

    def ready(self, leaf):
        """``backward(on_ready=)``'s hook (the class docstring)."""
        b = self._bucket_of.get(id(leaf))
        if b is None or not hasattr(self.comm, "start"):
            return
        self._left[b] -= 1
        while self._next >= 0 and self._left[self._next] == 0:
            self._started[self._next] = self._start(self._next)
            self._next -= 1


class GradientAllreduce(Buckets):
    """Averages the ``.grad`` of ``params`` over ``comm``'s ranks in buckets of about ``bucket_bytes``."""

    def __init__(self, params, comm, bucket_bytes=None):
        if not (bucket_bytes is None or isinstance(bucket_bytes, int) and bucket_bytes > 0):
            raise ValueError(f"GradientAllreduce: bucket_bytes={bucket_bytes!r}; use an int > 0 (bytes per "
                             "allreduce), or None to size them from the parameters")
        super().__init__(params, comm, bucket_bytes)

    def _start(self, b):
        return self.comm.start("allreduce", pack(self._params(b)))

    def __call__(self):
        """Replace each gradient by its mean over the ranks (one allreduce per bucket): those ``ready`` started are
        waited for, the rest run now, in the same reverse order."""
        started, n = self._started, len(self.buckets)
        self._reset()
        for b in range(n - 1, -1, -1):
            params = self._params(b)
            summed = started[b].wait() if b in started else self.comm.allreduce(pack(params))
            unpack(params, summed, self.comm.world_size)


def buckets_of(params, bucket_bytes=None):
    """Lists of indices into ``params``, in parameter order, one dtype each, of at most ``bucket_bytes`` (by default
    ``default_bucket_bytes``) but where one parameter is larger: they depend on the parameters alone, so a blocking
    and an overlapped run, and every rank, send the same vectors."""
    bucket_bytes = bucket_bytes or default_bucket_bytes(params)
    buckets = []
    for i, p in enumerate(params):
        last = buckets[-1] if buckets else None
        if last and params[last[0]].dtype == p.dtype and \
                sum(params[j].data.nbytes for j in last) + p.data.nbytes <= bucket_bytes:
            last.append(i)
        else:
            buckets.append([i])
    return buckets


def default_bucket_bytes(params):
    """A quarter of the parameters' bytes, at most 4 MiB: a bucket starts only when the earliest layer in it has its
    gradient, so one bucket of every parameter (a small model under 4 MiB) would wait for the whole backward, and
    all of its allreduce would be exposed. In quarters, the last layers' buckets start while the backward goes on,
    and the one left for the backward's end holds at most a quarter; three more messages cost microseconds of
    latency on the links modelled, where the allreduce of a layer hides behind the rest of the backward. Above
    16 MiB the 4 MiB cap makes more buckets, of a size that amortises a message's latency."""
    return traffic.bucket_bytes(sum(p.data.nbytes for p in params))


class SliceGradients(Buckets):
    """The dense gradients of ``params``, summed in one fixed order whatever the world size (``--deterministic``).

    Each rank ``keep()``s the gradients of each of its micro-slices of the global batch, apart; the call gathers
    every rank's, so that every rank holds the S slices' in global slice order, and adds them up in that order. The
    sum is then the same bits on 1, 2 or 4 ranks, where an allreduce adds in an order the ranks decide. The cost:
    S vectors of the parameters gathered (counted under ``allreduce``), against one vector allreduced.

    On an overlapped communicator they travel in ``GradientAllreduce``'s buckets, one gather each; on a blocking
    one, as one gather. A gather only moves the slices' vectors, and the sum adds each element over the slices in
    slice order, so splitting the vector changes no bit. On an overlapped communicator the last slice's backward
    starts a bucket's gather once its gradients are complete (``ready``, the last slice's ``backward(on_ready=)``
    hook), and ``start`` the rest right after it, before the step starts any other collective: every rank starts
    them in the same order, and they travel during the lookups' backward. None starts earlier: a bucket's gather
    carries every slice of the rank, and only the last slice completes it (one gather a slice would be S/W times
    the messages)."""

    def __init__(self, params, comm, bucket_bytes=None):
        params = list(params)
        if bucket_bytes is None and not hasattr(comm, "start"):
            # nothing overlaps a blocking gather: one for the whole vector, not one a bucket (a latency each)
            bucket_bytes = max(1, sum(p.data.nbytes for p in params))
        super().__init__(params, comm, bucket_bytes)
        self.kept = []  # per slice, a packed vector a bucket (None: in a gather started already)
        dtypes = sorted({str(p.dtype) for p in self.params})
        if len(dtypes) > 1:
            raise ValueError(f"SliceGradients: the parameters are of {', '.join(dtypes)}; the slices' gradients "
                             "travel as one vector of one dtype, so give every dense parameter the same dtype")

    def keep(self):
        """Take the gradients of one slice's backward off the parameters (each is None afterwards)."""
        if self.params:
            self.kept.append([None if b in self._started else pack(self._params(b)) for b in range(len(self.buckets))])
        for p in self.params:
            p.grad = None

    def start(self):
        """After the last slice's ``keep()``: on an overlapped communicator, start the gathers ``ready`` did not (a
        parameter the last slice gave no gradient holds its bucket back), in the same order."""
        if hasattr(self.comm, "start"):
            for b in range(self._next, -1, -1):
                self._started[b] = self._gather(b)
            self._next = -1

    def _start(self, b):
        return self._gather(b, pack(self._params(b)))

    def _gather(self, b, last=None):
        rows = [k[b] for k in self.kept] + ([] if last is None else [last])  # this rank's slices, in order
        return self.comm.start("allgather", get_array_module(rows[0]).stack(rows), tag="allreduce")

    def __call__(self):
        """Set each gradient to the sum over every slice of every rank, added in slice order."""
        if not self.params:
            return
        kept, started, self.kept = self.kept, self._started, []
        self._reset()
        for b in range(len(self.buckets) - 1, -1, -1):
            if b in started:
                every = started[b].wait()  # [S, n]: slice order
            else:
                every = self.comm.allgather(get_array_module(kept[0][b]).stack([k[b] for k in kept]), tag="allreduce")
            total = every[0].copy()
            for row in every[1:]:
                total += row
            unpack(self._params(b), total, 1)


def pack(params):
    """One flat vector: each parameter's gradient (zeros where it has none), then a 1 per parameter that has one."""
    xp, dtype = get_array_module(params[0].data), params[0].dtype
    parts = [(p.grad if p.grad is not None else xp.zeros_like(p.data)).reshape(-1) for p in params]
    return xp.concatenate(parts + [xp.asarray([p.grad is not None for p in params], dtype=dtype)])


def unpack(params, flat, divisor):
    """Set the gradients from a sum of ``pack``ed vectors, divided by ``divisor``; None where no part had one."""
    at = 0
    for p in params:
        p.grad = flat[at:at + p.size].reshape(p.shape)
        if divisor != 1:
            p.grad = p.grad / p.dtype.type(divisor)
        at += p.size
    for p, count in zip(params, to_host(flat[at:])):
        if not count:
            p.grad = None
