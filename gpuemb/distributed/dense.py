"""Data-parallel dense parameters: the same initial values on every rank, and gradients averaged over ranks.

``broadcast_parameters`` copies rank 0's values into every rank's parameters once, before training.
``GradientAllreduce`` is called each step between ``loss.backward()`` and ``optimizer.step()``: it packs the
gradients into buckets of about ``bucket_bytes``, one allreduce per bucket (fewer, larger messages than one per
parameter), and divides by the world size, since each rank's loss is the mean over its own part of the batch.

Each bucket also carries, per parameter, 1 where this rank has a gradient: a parameter no rank has a gradient
for keeps ``grad = None`` (so the optimizer skips it, as it would on one rank); one that only some ranks have a
gradient for gets the sum of theirs (zeros for the others) over the world size.
"""
from gpuemb.autograd.backend import get_array_module, to_host


def broadcast_parameters(params, comm, root=0):
    """Set every parameter (an iterable of Tensors) to rank ``root``'s values, in place."""
    for p in params:
        p.data[...] = comm.broadcast(p.data, root=root)


class GradientAllreduce:
    """Averages the ``.grad`` of ``params`` over ``comm``'s ranks in buckets of about ``bucket_bytes``."""

    def __init__(self, params, comm, bucket_bytes=4 << 20):
        if not (isinstance(bucket_bytes, int) and bucket_bytes > 0):
            raise ValueError(f"GradientAllreduce: bucket_bytes={bucket_bytes!r}; use an int > 0 (bytes per "
                             "allreduce)")
        self.params, self.comm = list(params), comm
        self.buckets = []  # lists of parameter indices, one dtype each, in parameter order
        for i, p in enumerate(self.params):
            last = self.buckets[-1] if self.buckets else None
            if last and self.params[last[0]].dtype == p.dtype and \
                    sum(self.params[j].data.nbytes for j in last) + p.data.nbytes <= bucket_bytes:
                last.append(i)
            else:
                self.buckets.append([i])

    def __call__(self):
        """Replace each gradient by its mean over the ranks (one allreduce per bucket)."""
        W = self.comm.world_size
        for bucket in self.buckets:
            params = [self.params[i] for i in bucket]
            xp = get_array_module(params[0].data)
            dtype = params[0].dtype
            parts = [(p.grad if p.grad is not None else xp.zeros_like(p.data)).reshape(-1) for p in params]
            have = xp.asarray([p.grad is not None for p in params], dtype=dtype)
            flat = self.comm.allreduce(xp.concatenate(parts + [have]))
            at = 0
            for p, n in zip(params, [q.size for q in params]):
                p.grad = flat[at:at + n].reshape(p.shape) / dtype.type(W)
                at += n
            for p, count in zip(params, to_host(flat[at:])):
                if not count:
                    p.grad = None
