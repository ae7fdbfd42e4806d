"""A run's step strategy: what its step does (``steps.py``) and how it prepares the next batch (``ahead.py``),
chosen once from the flags when the run is built. The trainer and the pipeline hold the chosen objects and call
them at every step; neither asks the flags, the communicator or the tables again.

The two choices are orthogonal:

| step (``STEPS``) | when |
|---|---|
| ``whole`` | fp32, bf16, tf32 |
| ``loss_scaled`` | ``--precision fp16`` |
| ``sliced`` | ``--deterministic N`` (which refuses fp16, ``Cluster``) |

| ahead (``AHEAD``) | when |
|---|---|
| ``nothing`` | ``--no-pipeline``; or sharded tables on a blocking communicator |
| ``prefetch`` | tables whole: one rank, without ``--deterministic`` or ``--plan`` |
| ``route_ahead`` | sharded tables on an overlapped communicator: several ranks with ``--overlap-comm`` |
"""
from dataclasses import dataclass

from gpuemb.distributed import ShardedEmbeddingCollection
from gpuemb.optim import LossScaler
from gpuemb.store.collection import EmbeddingCollection

from .ahead import Nothing, Prefetch, RouteAhead
from .cluster import keeps_tables_whole, overlaps
from .steps import ScaledStep, SlicedStep, WholeStep

# each builds its step from the run's Cluster, once the model is sharded (the slices are the cluster's)
STEPS = {
    "whole": lambda cluster: WholeStep(),
    "loss_scaled": lambda cluster: ScaledStep(LossScaler()),  # dynamic: fp16's gradients underflow without it
    "sliced": lambda cluster: SlicedStep(cluster.slices),
}

# each builds its preparation from the (sharded) model, and whether a worker thread prefetches (None: on a device)
AHEAD = {
    "nothing": lambda model, worker_thread: Nothing(),
    "prefetch": lambda model, worker_thread: Prefetch(_modules(model, EmbeddingCollection), worker_thread),
    "route_ahead": lambda model, worker_thread: RouteAhead(_modules(model, ShardedEmbeddingCollection)),
}


@dataclass(frozen=True)
class Strategy:
    """The names of a run's step (a key of ``STEPS``) and of how it prepares the next batch (of ``AHEAD``)."""

    step: str
    ahead: str

    def build_step(self, cluster):
        """The step's object for the trainer (``Trainer(kind=)``)."""
        return STEPS[self.step](cluster)

    def build_ahead(self, model, worker_thread=None):
        """The preparation's object for the pipeline (``Pipeline(ahead=)``)."""
        return AHEAD[self.ahead](model, worker_thread)


def choose(config, world_size):
    """The strategy of a run of ``config`` (a ``TrainConfig``) on ``world_size`` ranks."""
    step = "sliced" if config.run.deterministic else "loss_scaled" if config.optimization.precision == "fp16" \
        else "whole"
    if not config.run.pipeline:
        ahead = "nothing"
    elif keeps_tables_whole(config, world_size):
        ahead = "prefetch"
    else:
        ahead = "route_ahead" if overlaps(config, world_size) else "nothing"
    return Strategy(step, ahead)


def _modules(model, kind):
    return [m for m in model.modules() if isinstance(m, kind)]
