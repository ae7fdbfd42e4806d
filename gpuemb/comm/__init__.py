"""gpuemb.comm: communicators (local, MPI, NCCL) with checked, deadline-bound collectives, and the wire codecs of
the embedding all-to-all (docs/design.md, "Communication and sharding"; docs/comm.md).

``init()`` picks the backend: local when the process was not launched by ``mpiexec`` with more than one rank,
else NCCL on a GPU and MPI on the CPU; with a link (``init(link=...)`` or ``$GPUEMB_COMM_LINK``) it wraps the
backend in a ``ModelledCommunicator`` whose collectives take as long as that link would (modelled.py).
"""
import faulthandler
import os
import sys

from gpuemb.autograd.backend import gpu_available

from .base import (DEFAULT_TIMEOUT_S, OPS, REDUCE_OPS, TIMEOUT_ENV, CommError, Communicator, check_agreement, header,
                   resolve_timeout)
from .codec import CommCodecs, WireCodec, alltoallv_encoded
from .link import CHOICES as LINKS, LINK_ENV, PRESETS as LINK_PRESETS, Link, link_from_env, parse_link
from .local import LocalCommunicator
from .modelled import ModelledCommunicator
from .overlap import OverlappedCommunicator, Pending

BACKENDS = ("auto", "local", "mpi", "nccl")
# what launchers export: MPICH/Intel MPI (hydra) and Slurm's PMI, Open MPI, MVAPICH
SIZE_ENV = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
RANK_ENV = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK")


def launched_world_size():
    """The number of ranks this process was launched with: from the launcher's environment, else from MPI when
    the environment says MPI launched it or mpi4py is already in use; 1 otherwise (plain ``python``)."""
    for name in SIZE_ENV:
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    if any(name in os.environ for name in RANK_ENV) or "mpi4py.MPI" in sys.modules:
        try:
            from mpi4py import MPI
        except ImportError:
            return 1
        return MPI.COMM_WORLD.Get_size()
    return 1


def _mpi(timeout_s):
    try:
        from .mpi import MpiCommunicator
    except ImportError as e:
        raise CommError(f"the mpi backend needs mpi4py ({e}); install the mpi extra: pip install -e '.[mpi]'") \
            from None
    return MpiCommunicator(timeout_s)


def init(backend="auto", timeout_s=None, link=None, local_link=None):
    """A Communicator of ``backend``: auto, local, mpi or nccl; over a modelled ``link`` where one is given.

    auto: local for one rank, else nccl on a GPU and mpi on the CPU. ``timeout_s`` bounds every collective
    (default ``$GPUEMB_COMM_TIMEOUT``, else 300 s): past it, every rank is aborted with a one-line reason.
    Under MPI, an uncaught exception on any rank aborts every rank too. ``init`` itself is bounded the same way.
    ``link``: a ``Link``, or a preset's name or ``LAT_US:GBPS`` (``link.py``), or none (default
    ``$GPUEMB_COMM_LINK``, else none): every collective then also waits out that link's time (``modelled.py``).
    ``local_link``: the same, for the link between the ranks of one host (``gpuemb.distributed.hosts``: hosts
    declared in ``$GPUEMB_LOCAL_RANKS``, else the launcher's); ``link`` is then the link between hosts.
    """
    if backend not in BACKENDS:
        raise ValueError(f"gpuemb.comm.init: backend={backend!r}; use one of {', '.join(BACKENDS)}")
    timeout_s = resolve_timeout(timeout_s)
    if not isinstance(link, Link):  # a bad name fails here, before MPI starts
        link = link_from_env() if link is None else parse_link(link)
    if not (local_link is None or isinstance(local_link, Link)):
        local_link = parse_link(local_link, "local link")
    if local_link is not None and link is None:
        raise ValueError(f"gpuemb.comm.init: a local link ({local_link.name}) without a link between hosts; give "
                         "link too (e.g. --link ib400 --local-link nvlink4)")
    # MPI_Init and ncclCommInitRank wait for every rank inside C code, where no Python watchdog can run; a rank
    # that died before init would leave the others there forever. faulthandler's timer is a C thread: past the
    # deadline it prints "Timeout" with the traceback (ending in this function) and exits with status 1.
    faulthandler.dump_traceback_later(timeout_s, exit=True, file=sys.__stderr__)
    try:
        inner = _start(backend, timeout_s)
    finally:
        faulthandler.cancel_dump_traceback_later()
    if link is None:
        return inner
    if local_link is None:
        return ModelledCommunicator(inner, link)
    from gpuemb.distributed.hosts import local_ranks  # a step up from here: the hosts are the sharding's too
    try:
        L = local_ranks(inner)
    except ValueError as e:
        raise ValueError(f"the hosts of the local link {local_link.name}: {e}") from None
    return ModelledCommunicator(inner, link, local_link=local_link, local_ranks=L)


def _start(backend, timeout_s):
    world = launched_world_size()
    if backend == "auto":
        backend = "local" if world == 1 else "nccl" if gpu_available() else "mpi"
    if backend == "local":
        if world > 1:
            raise CommError(f"gpuemb.comm.init: backend='local' in a job of {world} ranks; every rank would train "
                            f"alone. Use backend='auto', 'mpi' or 'nccl', or launch one process")
        return LocalCommunicator(timeout_s)
    if backend == "mpi":
        return _mpi(timeout_s)
    if not gpu_available():
        raise CommError("gpuemb.comm.init: backend='nccl' needs a GPU, and the backend chose the CPU; use "
                        "backend='mpi' or 'auto', or run on a machine with a GPU and the gpu extra")
    from .nccl import NcclCommunicator
    control = LocalCommunicator(timeout_s) if world == 1 else _mpi(timeout_s)
    return NcclCommunicator(control, timeout_s)


__all__ = ["init", "launched_world_size", "BACKENDS", "SIZE_ENV", "RANK_ENV", "Communicator", "CommError",
           "LocalCommunicator", "WireCodec", "CommCodecs", "alltoallv_encoded", "check_agreement", "header",
           "resolve_timeout",
           "DEFAULT_TIMEOUT_S", "TIMEOUT_ENV", "OPS", "REDUCE_OPS", "ModelledCommunicator", "OverlappedCommunicator",
           "Pending", "Link", "parse_link",
           "LINKS", "LINK_ENV", "LINK_PRESETS"]
