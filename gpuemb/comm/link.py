"""A modelled link between ranks: a latency and a bandwidth (the alpha-beta model), and the presets of real ones.

A link moves ``m`` messages carrying ``b`` bytes in ``m · latency + b / bandwidth`` seconds. ``bandwidth`` is one
direction's: the links below are full duplex, so a rank sends and receives at once, each at that rate.

| preset | link | latency | bandwidth, one direction |
|---|---|---|---|
| ib100 | InfiniBand HDR100 | 0.6 us | 12.5 GB/s (100 Gb/s) |
| ib400 | InfiniBand NDR | 0.6 us | 50 GB/s (400 Gb/s) |
| nvlink4 | NVLink 4 of an H100 SXM | 2 us | 450 GB/s |

Sources: NVIDIA's ConnectX-6 VPI adapter user manual gives HDR100 "an effective bandwidth of 100Gb/s" and the
adapter "sub-600ns latency". NVIDIA's ConnectX-7 VPI user manual gives NDR 400 Gb/s and no lower latency, so
ConnectX-6's is kept. NVIDIA's H100 Tensor Core GPU data sheet gives NVLink 900 GB/s per GPU, both directions of
its 18 links together: 450 GB/s each way. NVIDIA publishes no NVLink latency; 2 us is the GPU-to-GPU write latency
over NVLink that CUDA's p2pBandwidthLatencyTest sample reports (NVIDIA/cuda-samples issue 230). The adapters'
latencies leave out switches and software, so a measured end-to-end figure, given as ``LAT_US:GBPS``, is closer.
"""
import math
import os
from dataclasses import dataclass

LINK_ENV = "GPUEMB_COMM_LINK"


@dataclass(frozen=True)
class Link:
    """A link of ``latency_s`` seconds a message and ``bandwidth`` bytes per second each way; ``name`` says which."""

    name: str
    latency_s: float
    bandwidth: float

    def __post_init__(self):
        self.validate()

    def validate(self):
        if not (math.isfinite(self.latency_s) and self.latency_s >= 0):
            raise ValueError(f"link {self.name}: latency {self.latency_s!r} s; use a finite number of seconds >= 0")
        if not (math.isfinite(self.bandwidth) and self.bandwidth > 0):
            raise ValueError(f"link {self.name}: bandwidth {self.bandwidth!r} B/s; use a finite number > 0")

    def seconds(self, messages, nbytes):
        """How long ``messages`` messages carrying ``nbytes`` bytes in all take on this link."""
        return messages * self.latency_s + nbytes / self.bandwidth


PRESETS = {"ib100": Link("ib100", 0.6e-6, 12.5e9),
           "ib400": Link("ib400", 0.6e-6, 50e9),
           "nvlink4": Link("nvlink4", 2e-6, 450e9)}
CHOICES = ("none",) + tuple(PRESETS) + ("LAT_US:GBPS",)


def parse_link(text, where="link"):
    """The Link that ``text`` names: a preset, or ``LAT_US:GBPS`` (microseconds, GB/s each way); None for none.
    ``where``: what the error names as the setting, e.g. ``--link``."""
    if text in (None, "", "none"):
        return None
    if text in PRESETS:
        return PRESETS[text]
    latency, _, bandwidth = text.partition(":")
    try:
        return Link(text, float(latency) * 1e-6, float(bandwidth) * 1e9)
    except ValueError:
        raise ValueError(f"{where} {text!r} is not a link; use one of {', '.join(CHOICES)} "
                         "(latency in microseconds, bandwidth in GB/s each way, e.g. 1.5:25)") from None


def link_from_env():
    """The link ``$GPUEMB_COMM_LINK`` names (None when unset or none)."""
    return parse_link(os.environ.get(LINK_ENV), f"${LINK_ENV}")
