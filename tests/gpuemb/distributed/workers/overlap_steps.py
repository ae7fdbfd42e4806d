"""Run by test_overlap.py under ``mpiexec -n W``: a sharded DLRM trained a few steps on a blocking communicator,
then again on an ``OverlappedCommunicator`` with every overlap on: the next batch's key exchange started during
each step (``route_ahead``), the rows' all-to-all during the bottom MLP (checked: the rows had not arrived when it
ran), the gradients' all-to-all during the rest of the backward and the dense step (checked: when the bottom MLP's
gradients were complete and when the dense optimizer stepped, it had been started and its row updates were still
held) and the dense allreduce in buckets during the backward (the model's default buckets: several, though all of
its parameters fit 4 MiB). Both runs must be the same bits: every loss, dense parameter and row of this rank's
shards.

argv: the placement kind of the first three tables (table, row or column; the fourth is data-parallel), a seed,
and ``bags`` for multi-hot features (two keys a feature, summed): their bags' key exchange is started ahead too.
Prints "rank R: ok".
"""
import sys


from common import assert_same_bits, batch, dlrm, plan
from gpuemb import comm
from gpuemb import optim
from gpuemb.autograd import Tensor, bce_with_logits
from gpuemb.comm import OverlappedCommunicator
from gpuemb.distributed import ShardedEmbeddingCollection, distribute, keys_ahead

KIND, SEED, G, STEPS = sys.argv[1], int(sys.argv[2]), 24, 4
BAGS = sys.argv[3:] == ["bags"]
HOTNESS = [2, 2, 2, 2] if BAGS else None
TAKEN, ARRIVED, READ, IN_FLIGHT = [], [], [], []
_take = keys_ahead.KeysAhead.take
keys_ahead.KeysAhead.take = lambda self: TAKEN.append(1) or _take(self)
_take_bags = keys_ahead.BagKeys.take  # an exchange started ahead has its batch's sparse features as its source
keys_ahead.BagKeys.take = lambda self: (self.source is not None and TAKEN.append(1)) or _take_bags(self)
_keys = ShardedEmbeddingCollection._keys  # each read of a batch's keys to the host
ShardedEmbeddingCollection._keys = lambda self, sparse: READ.append(1) or _keys(self, sparse)
_bags = ShardedEmbeddingCollection._bags  # and of its bags
ShardedEmbeddingCollection._bags = lambda self, sparse: READ.append(1) or _bags(self, sparse)


def train(c, overlap):
    W, r = c.world_size, c.rank
    b = G // W
    mine = slice(r * b, (r + 1) * b)
    model = dlrm(hotness=HOTNESS)
    allreduce = distribute(model, c, plan(KIND, W))
    lookups, bottom = [], model.bottom.forward
    collection_forward = model.embeddings.forward
    model.embeddings.forward = lambda sparse: lookups.append(collection_forward(sparse)) or lookups[-1]
    # what DLRM computes while the rows travel: the bottom MLP runs before the interaction reads them
    model.bottom.forward = lambda x: ARRIVED.append(getattr(lookups[-1], "arrived", True)) or bottom(x)
    opt = optim.Adagrad(model.parameters(), 0.05)
    bottom_params = {id(p) for p in model.bottom.parameters()}
    started = []  # the tags of the collectives started, in order
    if overlap:
        _start = c.start

        def start(op, *args, **kwargs):  # records each started collective's tag (its last argument), or its op
            started.append(args[-1] if args and isinstance(args[-1], str) else op)
            return _start(op, *args, **kwargs)
        c.start = start
    assert len(allreduce.buckets) > 1, allreduce.buckets  # the default splits a model of under 4 MiB

    def in_flight(where):
        # the gradients' all-to-all was started, and the rows it updates wait for it (none where no stream is here)
        held = len(getattr(model.embeddings.row_updates, "_held", ()))
        IN_FLIGHT.append((where, "a2a_bwd" in started, held))

    def ready(leaf):
        if overlap and id(leaf) in bottom_params:
            in_flight("bottom")
        allreduce.ready(leaf)
    losses = []
    parts = [tuple(a[mine] for a in batch(SEED, step, G, F=8 if BAGS else 4))  # as the pipeline hands them
             for step in range(STEPS)]
    for step, (dense, sparse, y) in enumerate(parts):
        opt.zero_grad()
        loss = bce_with_logits(model(dense, sparse), Tensor(y))
        if overlap and step + 1 < STEPS:  # once this step's lookups are done, as the training loop does
            model.embeddings.route_ahead(parts[step + 1][1])
        started.clear()
        loss.backward(on_ready=ready)
        allreduce()
        if overlap:
            in_flight("optimizer")
        opt.step()
        model.embeddings.settle()  # at the step's end, as the training loop does
        losses.append(loss.data.copy())
    rows = {n: s.table.export() for n, s in model.embeddings.shards.items()}
    return losses, [p.data.copy() for p in model.parameters()], rows


def main():
    c = comm.init()
    blocking = train(c, overlap=False)
    assert not TAKEN and all(ARRIVED), ARRIVED
    assert len(READ) == STEPS, READ
    ARRIVED.clear(), READ.clear()
    over = OverlappedCommunicator(c)
    overlapped = train(over, overlap=True)
    assert len(TAKEN) == (STEPS - 1 if model_has_streams() else 0), TAKEN
    assert len(ARRIVED) == STEPS and not any(ARRIVED), ARRIVED  # each step's rows were still on their way
    assert len(READ) == STEPS, READ  # a batch's keys are read once, by route_ahead, not again by its forward
    bottoms = [f for f in IN_FLIGHT if f[0] == "bottom"]
    assert len(bottoms) == 4 * STEPS and len(IN_FLIGHT) == 5 * STEPS, IN_FLIGHT  # bottom: 2 layers, 4 parameters
    assert all(sent == model_has_streams() and held == sent for _, sent, held in IN_FLIGHT), IN_FLIGHT
    assert_same_bits(c.rank, blocking, overlapped)
    over.drain()
    print(f"rank {c.rank}: ok", flush=True)


def model_has_streams():
    return KIND != "data"


main()
