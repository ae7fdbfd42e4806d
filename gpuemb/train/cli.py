"""The command line of ``tools/train.py``: flags made from TrainConfig's fields, a progress bar, a summary.

Settings come from the defaults, then ``--config FILE``, then the flags given. Any setting that cannot work is
one line on stderr and exit code 2, before training starts; a run that fails later exits 1 with one line.
"""
import argparse
import dataclasses
import json
import math
import sys
import time

from tqdm import tqdm

from gpuemb.autograd import backend
from gpuemb.comm import LocalCommunicator
from gpuemb.io.errors import DataError
from gpuemb.store.errors import StoreError

from .config import FIELDS, SECTIONS, TrainConfig
from .fields import choices_of, default_of, flag_of, key_of
from .errors import ConfigError, TrainError
from .recipes import RUN_PRESETS
from .run import Reporter, train

PROG = "train.py"


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (what was wrong, and where the flags are listed) and exit code 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _key_value(text):
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value  # plain text, such as a name


def parser(description=None):
    """The parser of every TrainConfig field (defaults suppressed, so only the flags given are in its result)."""
    p = Parser(prog=PROG, usage=f"{PROG} [--model NAME] [--data PATH] [--steps N] [...]", description=description,
               formatter_class=argparse.RawDescriptionHelpFormatter, argument_default=argparse.SUPPRESS)
    p.add_argument("--config", metavar="FILE", help="a .toml or .json file of settings (keys as the flags)")
    for section, cls in SECTIONS.items():
        group = p.add_argument_group(section)
        for f in dataclasses.fields(cls):
            group.add_argument(flag_of(f), **_argument(f))
    return p


def _argument(f):
    """argparse's keywords for the setting ``f``: its help and default, and how its value is read."""
    m, kind, default = f.metadata, f.metadata["kind"], default_of(f)
    shown = "" if default in (None, True) or kind == "dict" else f" (default {default})"
    kw = {"help": m["help"] + shown, "dest": key_of(f)}
    if kind == "bool":
        kw.update(action="store_false")
    elif kind == "dict":
        kw.update(action="append", type=_key_value, metavar="KEY=VALUE")
    elif kind == "list":
        kw.update(nargs="+", metavar="NAME")
    elif kind == "choice":
        kw.update(choices=choices_of(f))
    else:
        kw.update(type={"int": int, "float": float, "str": str}[kind], metavar=key_of(f).split("_")[-1].upper())
    if m["bare"] is not None:
        kw.update(nargs="?", const=m["bare"], metavar="PATH" if kind == "str" else "N")
    return kw


def parse_config(argv, description=None):
    """The TrainConfig of ``argv``; a bad flag, value, file or combination exits 2 with one line."""
    p = parser(description)
    values = vars(p.parse_args(argv))
    path = values.pop("config", None)
    for key in [k for k in values if FIELDS[k].metadata["kind"] == "dict"]:
        values[key] = dict(values[key])  # KEY=VALUE pairs, one a flag
    try:
        if path is None:
            return TrainConfig.from_dict(values, "the command line")
        return TrainConfig.from_file(path, values)
    except ConfigError as e:
        p.error(str(e))


def check_startup(config):
    """The checks that need the backend or optional packages; ConfigError if one fails."""
    if config.run.device not in (None, "auto") and config.run.device != backend.DEVICE:
        raise ConfigError(f"--device: {config.run.device} was asked for, but gpuemb was imported on "
                          f"{backend.DEVICE}; set GPUEMB_DEVICE before importing it, or run tools/train.py")
    if config.output.plot:
        from .plot import require_matplotlib
        require_matplotlib()


class ProgressBar(Reporter):
    """A tqdm bar of steps with samples/s and the loss; eval and checkpoint records as lines above it."""

    def __init__(self, show=True, out=sys.stdout):
        self.show, self.out, self.bar = show, out, None

    def start(self, run):
        info = backend.device_info()
        hyper = {k: v for k, v in run.model.hyper.items() if v is not None}
        n_dense = sum(p.size for p in run.model.parameters())
        print(f"device: {info['device']} ({info['reason']})", file=self.out)
        print(f"data: {run.data.description}", file=self.out)
        if run.config.data.preset in RUN_PRESETS:  # what the preset is, and its cap; the lines below what runs
            print(f"preset: {run.config.data.preset}, {RUN_PRESETS[run.config.data.preset].about} (flags and "
                  "--config override it)", file=self.out)
        print(f"model: {run.config.model.name} {hyper}, {n_dense:,} dense parameters, tables "
              f"{', '.join(f'{n} (D={t.dim}, {run.config.store.placement})' for n, t in run.tables.items())}", file=self.out)
        if run.cluster.world_size > 1:
            print(f"ranks: {run.cluster.describe()}", file=self.out)
        print(f"training: {run.total_steps} steps of {run.batch_size} samples, {run.config.optimization.optimizer} "
              f"lr {run.config.optimization.lr:g}, rows {run.config.optimization.embedding_optimizer} lr {run.config.optimization.embedding_lr:g}"
              + (f", resumed at step {run.step}" if run.step else ""), file=self.out)
        if self.show:
            self.bar = tqdm(total=run.total_steps, initial=run.step, unit="step", dynamic_ncols=True,
                            mininterval=0.5, file=self.out)
        self._start, self._first = None, run.step

    def step(self, run, loss):
        now = time.perf_counter()
        self._start = self._start or now  # from the end of the first step: it includes warm-up compiles
        if self.bar is not None:
            rate = (run.step - self._first - 1) * run.batch_size / (now - self._start) if now > self._start else 0
            self.bar.set_postfix_str(f"loss {loss:.4f}, {rate:,.0f} samples/s", refresh=False)
            self.bar.update(1)

    def record(self, record):
        if record["kind"] == "train" and self.bar is None:
            self._line(f"step {record['step']:6d}  loss {record['loss']:.4f}  "
                       f"{record['samples_per_s']:,.0f} samples/s")
        elif record["kind"] == "eval":
            teacher = f" (teacher {record['teacher_auc']:.4f})" if "teacher_auc" in record else ""
            self._line(f"step {record['step']:6d}  eval AUC {_num(record['auc'])}{teacher}  log-loss "
                       f"{record['log_loss']:.4f}  accuracy {record['accuracy']:.4f}  ({record['rows']:,} rows)")
        elif record["kind"] == "checkpoint":
            self._line(f"step {record['step']:6d}  checkpoint {record['path']}")
        elif record["kind"] == "warning":  # on stderr, where a script that reads the lines above looks for trouble
            print(f"{PROG}: warning: {record['message']}", file=sys.stderr, flush=True)

    def _line(self, text):
        if self.bar is not None:
            self.bar.write(text, file=self.out)
        else:
            print(text, file=self.out, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _num(value):
    return "n/a" if value is None else f"{value:.4f}"


def summary_line(s):
    """The one line that ends a run."""
    e = s["eval"]
    tasks = f" (tasks {', '.join(map(_num, e['task_auc']))})" if "task_auc" in e else ""
    teacher = f" (teacher {s['teacher_auc']:.4f}, the best reachable)" if s["teacher_auc"] is not None else ""
    rate = f"{s['samples_per_s']:,.0f} samples/s" if math.isfinite(s["samples_per_s"]) else "no steps"
    sent = s.get("comm_bytes_per_step")
    comms = (f"; {s['ranks']} ranks sent per step: " + ", ".join(f"{tag} {n:,} B" for tag, n in sent.items() if n)
             if sent and any(sent.values()) else "")
    return (f"done: step {s['steps']}, {s['steps_this_run']} steps in {s['seconds']:.1f} s ({rate}); eval AUC "
            f"{_num(e['auc'])}{tasks}{teacher}, log-loss {e['log_loss']:.4f}, accuracy {e['accuracy']:.4f} on "
            f"{e['rows']:,} rows" + comms + (f"; checkpoint {s['checkpoint']}" if s["checkpoint"] else ""))


def main(argv=None, description=None, comm=None):
    """Parse, check, train, print the summary; returns the exit code. ``description`` heads ``--help``.

    ``comm``: the job's communicator (``gpuemb.comm.init()``); with several ranks each trains its part, rank 0
    alone shows progress and the summary, and every rank prints its own errors."""
    config = parse_config(sys.argv[1:] if argv is None else argv, description)
    comm = comm or LocalCommunicator()
    several = comm.world_size > 1
    where = f" (rank {comm.rank} of {comm.world_size})" if several else ""
    lead = comm.rank == 0
    try:
        check_startup(config)
        summary = train(config, ProgressBar(config.output.progress) if lead else Reporter(), comm)
    except TrainError as e:
        print(f"{PROG}: error{where}: {e}", file=sys.stderr)
        return e.exit_code
    except (StoreError, DataError) as e:  # a cache too small for a batch, a shard that went bad while read
        print(f"{PROG}: error{where}: {e}", file=sys.stderr, flush=True)
        if several:
            # this rank's alone (say, the one rank whose table overflows): the others would wait in their next
            # collective for the whole timeout, so end them now
            comm.abort("stopped by the error above")
        return 1
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM, which tools/_entry.py raises as a KeyboardInterrupt
        print(f"{PROG}: {str(e) or 'interrupted'}{where}; --resume continues from the last checkpoint, if one was "
              "written", file=sys.stderr)
        return getattr(e, "exit_code", 130)
    if lead:
        print(summary_line(summary))
    return 0
