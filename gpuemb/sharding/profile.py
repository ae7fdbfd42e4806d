"""A device profile: how fast a rank gathers embedding rows and updates them, for the step-time estimate.

``DeviceProfile(name, gather_bps, update_bps)``: the forward's gather (and pooling) writes one vector a lookup at
``gather_bps`` bytes a second; the backward's row update reads and writes each unique row whole at
``update_bps``. The presets are measured figures of this project, each with its run:

- ``h200``: gather 54.6 GB/s, update 7.80 GB/s. One NVIDIA H200, 2026-11-27 run 2, ``tools/bench_ops.py``: the
  ``embedding_bag`` sum forward and backward of 200,000 rows of dim 64, batch 4096, bags of 20
  (``docs/perf/gpu-2026-11-27/run2-bench-ops.json``); launch-bound at that size.
- ``h200-copy``: 3,508 GB/s both. The device-to-device copy ceiling of the same run: the floor, every kernel at
  the memory's speed.
- ``cpu-2core``: gather 46.6 GB/s, update 0.201 GB/s. A 2-core AMD EPYC, shared: the ``embedding_bag`` sum forward
  of ``tools/bench_ops.py`` (``docs/perf/2026-11-24-cpu-bench-ops.json``), and the device store's lookup plus
  update, 386,913 unique rows of 260 bytes read and written a second (``tools/bench_store.py``,
  ``docs/perf/2026-11-21-cpu-bench-store.json``).

The GPU's row update was not timed on its own: the ``embedding_bag`` backward (sort, then scatter of the
gradients) stands in for it. Neither preset counts kernel launches or the host's time; docs/sharding.md says what
that leaves out.
"""
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceProfile:
    """A rank's embedding speeds: ``gather_bps`` bytes a second of looked-up vectors, ``update_bps`` of rows read
    and written by the row update; ``name`` says which device."""
    name: str
    gather_bps: float
    update_bps: float

    def __post_init__(self):
        self.validate()

    def validate(self):
        for field in ("gather_bps", "update_bps"):
            v = getattr(self, field)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"device profile {self.name}: {field}={v!r}; use a finite number of bytes a second "
                                 "> 0")
        return self

    def seconds(self, gather_bytes, update_bytes):
        """How long gathering ``gather_bytes`` and updating ``update_bytes`` take, one after the other."""
        return gather_bytes / self.gather_bps + update_bytes / self.update_bps


PROFILES = {"h200": DeviceProfile("h200", 54.6e9, 7.80e9),
            "h200-copy": DeviceProfile("h200-copy", 3507.6e9, 3507.6e9),
            "cpu-2core": DeviceProfile("cpu-2core", 46.6e9, 0.201e9)}


def profile_named(name, where="profile"):
    """The preset ``name``; ``where`` is the setting an error names (e.g. ``--profile``)."""
    if name not in PROFILES:
        raise ValueError(f"{where} {name!r} is not a device profile; use one of {', '.join(PROFILES)}")
    return PROFILES[name]
