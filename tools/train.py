"""The main job: train a recommendation model (DLRM by default) and evaluate it, from flags or a config file.

    python tools/train.py                                   # DLRM on synthetic data, best device, ~2 min on a CPU
    python tools/train.py --model dcn --steps 500
    python tools/train.py --data day_0.gz --format criteo --checkpoint-dir ckpt --checkpoint-every 1000
    python tools/train.py --checkpoint-dir ckpt --resume    # continue from ckpt/latest
    python tools/train.py --config run.toml --metrics-out metrics.jsonl --plot curves.png

Everything is in gpuemb.train; `--help` lists the flags.
"""
import argparse
import json
import os
import sys


def device_flag(argv):
    """``--device`` from the flags or the ``--config`` file, read before gpuemb is imported: the backend reads
    GPUEMB_DEVICE once, at import. Errors are left for the full parse to report."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--device")
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    if known.device or not known.config:
        return known.device
    try:
        with open(known.config, "rb") as f:
            if known.config.endswith(".json"):
                return json.load(f).get("device")
            import tomllib
            return tomllib.load(f).get("device")
    except Exception:  # the full parse reports what is wrong with the file
        return None


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    device = device_flag(argv)
    if isinstance(device, str) and device in ("auto", "cpu", "cuda"):
        os.environ["GPUEMB_DEVICE"] = device
    try:
        import gpuemb  # noqa: F401  (picks the device)
    except Exception as e:  # DeviceUnavailableError or a bad GPUEMB_DEVICE: a message, not a traceback
        print(f"train.py: {e}", file=sys.stderr)
        return 2
    from gpuemb.train.cli import main as train_main
    return train_main(argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
