"""ShardedEmbeddingCollection: an ``EmbeddingCollection`` whose tables are sharded over the ranks of a
communicator by a ``Plan`` (docs/distributed.md).

A drop-in for ``EmbeddingCollection``: ``forward(sparse) -> Tensor [B_local, F, D]`` (``[B_local, width]`` for
tables of several dims) on each rank's own part of the batch, train and eval modes (eval lookups do not insert),
rows updated in the backward by their tables' own rules. ``sparse`` is what ``EmbeddingCollection`` takes:
``[B, F]`` single keys (the plain exchange), or pooled
features (``[B, sum(hotness)]`` under fixed ``hotness``, ``JaggedFeatures``, ``(keys, offsets[, weights])``
bags), pooled by ``mode`` (``pooled_exchange.py``). Every rank must call it (and the backward) the same number
of times, in the same mode: each call is a set of collectives.
"""
import numpy as np

from gpuemb.autograd import Tensor, backend, is_grad_enabled
from gpuemb.autograd.arriving import ArrivingTensor
from gpuemb.comm import CommCodecs
from gpuemb.nn.module import Module
from gpuemb.io.jagged import JaggedFeatures
from gpuemb.kernels.embedding_bag import MODES
from gpuemb.sharding.hierarchical import relay_hosts
from gpuemb.store.collection import fixed_hotness, mixed_keys, stackable

from .bags import local_bags
from .column import coupled_groups
from .exchange import ShardedLookup
from .default_plan import plan_for
from .feature_layout import FeatureLayout
from .host_relay import HostRelay
from .keys_ahead import BagKeys, KeysAhead
from .pooled_exchange import ShardedPooledLookup
from .routing import streams_of
from .row_updates import row_updates_for
from .shards import check_against_plan, local_shards

TAGS = ("a2a_keys", "a2a_fwd", "a2a_bwd", "column_sums", "dp_allgather")


class ShardedEmbeddingCollection(Module):
    """F features over ``configs`` (one ``TableConfig`` per feature, or one config and ``n_features`` to share it),
    sharded over ``comm``'s ranks by ``plan`` (default: ``plan_for(configs, world_size)``), with the all-to-alls
    in ``codecs`` (default fp32 both ways); ``mode``, ``hotness`` and ``mixed_dims`` as in
    ``EmbeddingCollection``: pooling several keys of a feature, and tables of several dims, whose rows come out
    side by side, ``[B, width]``. ``dedup``: single keys go to their owner once a rank and stream, their rows come
    back once and their gradients go back summed (``routing.py``); off under ``same_bits``."""

    def __init__(self, configs, comm, plan=None, codecs=None, n_features=None, mode="sum", hotness=None,
                 mixed_dims=False, dedup=False):
        if mode not in MODES:
            raise ValueError(f"ShardedEmbeddingCollection: mode={mode!r}; use one of {', '.join(MODES)}")
        configs, self.dim = stackable(configs, n_features, "ShardedEmbeddingCollection", mixed_dims)
        self.mode = mode
        self.shared = n_features is not None
        self.comm, self.codecs = comm, codecs or CommCodecs()
        # each rank's loss is the mean over its part, so the requester divides gradients by W; off where the loss is
        # already the global batch's (--deterministic), which keeps a sample's gradient the same bits on any W
        self.rank_mean = True
        # on where a step must be the same bits on any W (--deterministic): a row-wise owner's partial sum of a bag
        # rounds by which of its keys the owner holds, so pooling such bags by sum or mean is refused then
        self.same_bits = False
        # a rank sends a key once to each owner however often its part holds it (routing.py): single keys only
        self.dedup = bool(dedup)
        self.n_features = n_features if self.shared else len(configs)
        self.hotness = fixed_hotness(hotness, self.n_features, "ShardedEmbeddingCollection")
        hot = {} if self.shared or self.hotness is None else {c.name: h for c, h in zip(configs, self.hotness)}
        self.plan = plan if plan is not None else plan_for(configs, comm.world_size, n_features, hotness=hot)
        check_against_plan(configs, self.plan, comm.world_size)
        self.configs = configs
        self.table_of = np.zeros(self.n_features, np.int64) if self.shared else np.arange(self.n_features)
        self.dims = tuple(configs[t].dim for t in self.table_of)  # per feature
        self.width = sum(self.dims)  # of one sample's embeddings side by side
        self.layout = FeatureLayout(self.dims, self.dim is None)
        names = [c.name for c in configs]
        self.shards = local_shards(configs, self.plan, comm.rank)
        self.streams, self.groups = streams_of(self.plan, names)
        # where the plan makes several hosts, keyed bags' partials combine within a host first (host_relay.py);
        # None: the single-level exchange
        L = relay_hosts(self.plan.local_ranks, comm.world_size)
        self.relay = HostRelay(L, comm.rank, comm.world_size, self.streams, self.groups) if L else None
        self.local_streams = [s for s, st in enumerate(self.streams) if st.held_by(comm.rank)]
        self.replicas = {c.name: (self.shards[c.name], np.flatnonzero(self.table_of == t))
                         for t, c in enumerate(configs) if self.plan.placement(c.name).kind == "data"}
        self.coupled = [(c.name, ranks) for c in configs for ranks in coupled_groups(self.plan.placement(c.name), c)]
        self._ahead = None  # the next training batch's key exchange, started during this step (keys_ahead.py)
        self.row_updates = row_updates_for(comm)  # applied in the backward, or held for settle() (row_updates.py)

    @property
    def tables(self):
        """This rank's local tables (its shards and replicas)."""
        return [s.table for s in self.shards.values()]

    def shard_of(self, stream):
        """The local shard that serves ``stream`` (an index into ``streams``)."""
        return self.shards[self.configs[self.streams[stream].table].name]

    def settle(self):
        """Apply the row updates that wait for their gradients' all-to-all (an overlapped communicator's). Every
        rank calls it at the same point of its step; the next forward and ``save_sharded`` call it too."""
        self.row_updates.settle()

    def forward(self, sparse):
        self.settle()  # a lookup reads the rows as the last backward left them
        sparse = self._plain(sparse)
        single = self._single_keys(sparse)  # else bags to pool
        if single and self.dedup and self.same_bits:
            raise ValueError("ShardedEmbeddingCollection: dedup adds a rank's gradients of one key before they "
                             "travel, so a row's update rounds by the world size; for the same bits on any world "
                             "size leave dedup off")
        if not single and self.same_bits and self.partial_sums():
            raise ValueError(f"ShardedEmbeddingCollection: table {self.partial_sums()[0]!r} is row-wise and "
                             f"pools bags by {self.mode}, whose partial sums round by the world size; for the "
                             "same bits on any world size shard it table- or column-wise, or pool by max")
        ahead, self._ahead = (self._ahead, None) if self.training else (None, self._ahead)
        # the batch route_ahead was given: its keys are on the host already, so no second read back
        mine = ahead.mine if ahead is not None and ahead.source is sparse else \
            (self._keys if single else self._bags)(sparse)
        if ahead is not None and not ahead.matches(mine):
            raise RuntimeError(f"ShardedEmbeddingCollection: this training batch is not the one whose "
                               f"{'keys' if single else 'bags'} route_ahead sent; call route_ahead with the batch "
                               "the next forward takes")
        op = (ShardedLookup if single else ShardedPooledLookup)(self, mine, self.training, ahead)
        record = self.training and is_grad_enabled()
        y = op.apply(Tensor(backend.xp.zeros(0, np.float32), requires_grad=record))
        return ArrivingTensor(y, op.arrive) if getattr(op, "arrive", None) else y  # rows still travelling

    def _plain(self, sparse):
        """Single-hot jagged features as the plain ``[B, F]`` keys they are."""
        if isinstance(sparse, JaggedFeatures) and sparse.single_hot and self.hotness is None:
            return sparse.dense()
        return sparse

    def _single_keys(self, sparse):
        """Whether ``sparse`` is a key a feature (the plain exchange), not bags to pool."""
        return self.hotness is None and not isinstance(sparse, (JaggedFeatures, list, tuple))

    def _keys(self, sparse):
        # routed to their owners on the host (distributed/routing.py): the keys come down once
        return mixed_keys(backend.to_host(sparse), self.n_features, self.shared, "ShardedEmbeddingCollection",
                          " (or give it hotness, JaggedFeatures or (keys, offsets) bags to pool)")

    def _bags(self, sparse):
        return local_bags(sparse, self.n_features, self.shared, self.hotness, self.mode)

    def route_ahead(self, sparse):
        """Start the key exchange of the training batch ``sparse`` (keys, or bags to pool) that the next training
        forward takes, on an overlapped communicator (``keys_ahead.py``); elsewhere the forward exchanges as before.
        Every rank calls it at the same point of its step."""
        sparse = self._plain(sparse)
        if not (hasattr(self.comm, "start") and self.streams):
            return
        if self._single_keys(sparse):
            self._ahead = KeysAhead(self, sparse, self._keys(sparse))
        else:
            self._ahead = BagKeys(self, self._bags(sparse), ahead=True, source=sparse)

    def partial_sums(self):
        """The names of the tables whose bags pool as partial sums over the ranks: keyed (row-wise, table-row-wise,
        grid), by sum or mean."""
        return [] if self.mode == "max" else [self.configs[st.table].name for st in self.streams if st.keyed]

    def comm_bytes(self, reset=True):
        """``{tag: bytes}`` this rank sent for the embeddings since the last reset: the key exchange
        (``a2a_keys``), rows (``a2a_fwd``), gradients (``a2a_bwd``), column-wise Adagrad sums (``column_sums``)
        and data-parallel gathers (``dp_allgather``). Call once a step; ``reset`` starts these tags over."""
        sent = {tag: int(self.comm.bytes_sent.get(tag, 0)) for tag in TAGS}
        if reset:
            for tag in TAGS:
                self.comm.bytes_sent.pop(tag, None)
        return sent
