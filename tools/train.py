"""The main job: train a recommendation model (DLRM by default) and evaluate it, from flags or a config file.

    python tools/train.py                                   # DLRM, synthetic data: 45 s on a quiet 2-core CPU
    python tools/train.py --model dcn --steps 500
    python tools/train.py --data day_0.gz --format criteo --checkpoint-dir ckpt --checkpoint-every 1000
    python tools/train.py --checkpoint-dir ckpt --resume    # continue from ckpt/latest
    python tools/train.py --config run.toml --metrics-out metrics.jsonl --plot curves.png
    mpiexec -n 2 python tools/train.py --comm-codec int8    # 2 ranks, dense layers replicated; the one shared table
                                                            # whole on rank 0 (--sharding row splits it)

Everything is in gpuemb.train; `--help` lists the flags.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # runpy.run_path leaves tools/ off the path
import _entry  # noqa: E402 (light: the standard library only)

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    _entry.guard()


# what launchers export as a rank's index on its host: MPICH/Intel MPI (hydra), Open MPI, MVAPICH, Slurm
LOCAL_RANK_ENV = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")


def early_flag(argv, name):
    """``--<name>`` from the flags or the ``--config`` file, read before gpuemb is imported (the backend reads
    GPUEMB_DEVICE once, at import, and the communicator must start before anything is on a GPU). Errors are
    left for the full parse to report."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--" + name)
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    value = getattr(known, name.replace("-", "_"))
    if value or not known.config:
        return value
    try:
        with open(known.config, "rb") as f:
            if known.config.endswith(".json"):
                values = json.load(f)
            else:
                import tomllib
                values = tomllib.load(f)
        return values.get(name, values.get(name.replace("-", "_")))
    except Exception:  # the full parse reports what is wrong with the file
        return None


def use_local_gpu(backend):
    """Under a launcher, make this rank's GPU the one of its index on the host (GPU 0 for the first rank of each
    host, 1 for the second...) before anything allocates, so ranks on a multi-GPU node do not share GPU 0."""
    local = next((os.environ[n] for n in LOCAL_RANK_ENV if os.environ.get(n, "").isdigit()), None)
    if local is not None and backend.gpu_available():
        cuda = backend.xp.cuda
        cuda.Device(int(local) % cuda.runtime.getDeviceCount()).use()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    device = early_flag(argv, "device")
    if isinstance(device, str):  # the backend names the devices, and refuses an unknown one below
        os.environ["GPUEMB_DEVICE"] = device
    try:
        from gpuemb.autograd import backend  # picks the device
        from gpuemb import comm
    except ValueError as e:  # the backend refuses a name it does not know
        where = "argument --device" if isinstance(device, str) else "GPUEMB_DEVICE"
        _entry.tell(f"train.py: error: {where}: invalid choice: {os.environ['GPUEMB_DEVICE']!r} ({e})")
        return 2
    except Exception as e:  # DeviceUnavailableError: a message, not a traceback
        _entry.tell(f"train.py: {e}")
        return 2
    use_local_gpu(backend)
    comm_backend, link, local = (early_flag(argv, name) for name in ("comm-backend", "link", "local-link"))
    link = link if isinstance(link, str) else None  # None: $GPUEMB_COMM_LINK, else none
    local = local if isinstance(local, str) else None
    for flag, text in (("--link", link), ("--local-link", local)):
        try:  # a bad link is refused before MPI starts, in the full parse's words
            comm.link.parse_link(text, flag)
        except ValueError as e:
            _entry.tell(f"train.py: error: argument {flag}: {str(e).removeprefix(flag + ' ')}")
            return 2
    try:
        between = comm.link.parse_link(link) if link is not None else comm.link.link_from_env()
    except ValueError as e:  # $GPUEMB_COMM_LINK names no link
        _entry.tell(f"train.py: error: {e}")
        return 2
    if comm.link.parse_link(local) is not None and between is None:
        _entry.tell(f"train.py: error: argument --local-link: {local} is the link within a host, and there is no "
                    "--link between hosts; give --link too (e.g. --link ib400 --local-link nvlink4)")
        return 2
    try:
        world = comm.init(comm_backend if comm_backend in comm.BACKENDS else "auto", link=link, local_link=local)
    except comm.CommError as e:  # local in a job of several ranks, nccl without a GPU, no mpi4py
        _entry.tell(f"train.py: error: --comm-backend: {e}")
        return 2
    except ValueError as e:  # $GPUEMB_COMM_TIMEOUT, or the hosts of --local-link: each names what is wrong
        _entry.tell(f"train.py: error: {e}")
        return 2
    from gpuemb.train.cli import main as train_main
    return train_main(argv, __doc__, world)


if __name__ == "__main__":
    _entry.run(main)
