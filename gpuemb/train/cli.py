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

from gpuemb import first_compile
from gpuemb.autograd import backend
from gpuemb.comm import LocalCommunicator
from gpuemb.io.errors import DataError
from gpuemb.store.errors import StoreError

from .config import FIELDS, SECTIONS, TrainConfig
from .fields import choices_of, default_of, flag_of, key_of
from .errors import ConfigError, TrainError
from .run import Reporter, train
from .startup import startup_lines

PROG = "train.py"
FIRST_COMPILE_S = 40  # the default run's first compile, measured on a 2-core machine: what a first run waits


def tell(line):
    """``line`` on stderr in one write. A non-terminal stderr writes through, so ``print`` wrote a line and its
    newline apart, and under ``mpiexec`` two ranks' lines once came out as one."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


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
    if kind == "bool":  # the flag turns the default over: --no-progress, --phase-times
        kw.update(action="store_true" if default is False else "store_false")
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
    """What a run shows as it goes: its startup lines, then on a terminal a tqdm bar of steps on stderr, and in a
    log (stdout not a terminal, or no bar) a plain line every ``--log-every`` steps; eval and checkpoint records
    as lines. Its rates start after the first step, whose time is mostly compiling on a first run."""

    def __init__(self, show=True, out=sys.stdout, bar_to=sys.stderr):
        self.show, self.out, self.bar_to, self.bar = show and bar_to.isatty(), out, bar_to, None
        # a log gets the lines a bar would have overwritten (a bar over the same terminal replaces them)
        self.lines = not self.show or not out.isatty()
        self.compiling, self.compiled_before = None, 0.0  # a first_compile.CompileWatch, and its seconds at start

    def say(self, line):
        """A line for the user, above the bar if one is drawn."""
        self._line(line)

    def start(self, run):
        for line in startup_lines(run):
            print(line, file=self.out)
        self.out.flush()
        self.compiled_before = self.compiling.seconds if self.compiling else 0.0  # the steps' own come after
        self.batch_size, self._first, self._mark, self._hit_rate = run.batch_size, run.step, None, None

    def step(self, run, loss):
        now = time.perf_counter()
        if self._mark is None:  # the first step ended: the rates count from here, without its compiling
            self._mark = self._since_first = run.step, now
            if self.show:
                self.bar = tqdm(total=run.total_steps, initial=run.step, unit="step", dynamic_ncols=True,
                                mininterval=0.5, file=self.bar_to)
            return
        if self.bar is not None:
            step0, t0 = self._since_first
            hits = "" if self._hit_rate is None else f", cache hits {self._hit_rate:.1%}"
            rate = (run.step - step0) * run.batch_size / (now - t0) if now > t0 else 0
            self.bar.set_postfix_str(f"loss {loss:.4f}, {rate:,.0f} samples/s{hits}", refresh=False)
            self.bar.update(1)

    def record(self, record):
        if record["kind"] == "train":
            self._hit_rate = record.get("hit_rate")
            if self.lines:
                hits = "" if self._hit_rate is None else f"  cache hits {self._hit_rate:.1%}"
                self._line(f"step {record['step']:6d}  loss {record['loss']:.4f}  "
                           f"{self._train_rate(record):,.0f} samples/s{hits}")
        elif record["kind"] == "eval":
            teacher = f" (teacher {record['teacher_auc']:.4f})" if "teacher_auc" in record else ""
            self._line(f"step {record['step']:6d}  eval AUC {_num(record['auc'])}{teacher}  log-loss "
                       f"{record['log_loss']:.4f}  accuracy {record['accuracy']:.4f}  ({record['rows']:,} rows)")
        elif record["kind"] == "checkpoint":
            self._line(f"step {record['step']:6d}  checkpoint {record['path']}")
        elif record["kind"] == "warning":  # on stderr, where a script that reads the lines above looks for trouble
            tell(f"{PROG}: warning: {record['message']}")

    def _train_rate(self, record):
        """The record's rate, but for the first record, whose steps include the first one (and its compiling):
        there the steps after the first, on this clock."""
        (step0, t0), now = self._mark or (record["step"], 0), time.perf_counter()
        self._mark = record["step"], now
        if step0 != self._first + 1 or record["step"] <= step0:
            return record["samples_per_s"]
        return (record["step"] - step0) * self.batch_size / (now - t0)

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


def summary_line(s, compiling=0.0):
    """The one line that ends a run; ``compiling``: the seconds of its steps that numba spent compiling, which
    its rate leaves out."""
    e = s["eval"]
    tasks = f" (tasks {', '.join(map(_num, e['task_auc']))})" if "task_auc" in e else ""
    teacher = f" (teacher {s['teacher_auc']:.4f}, the best reachable)" if s["teacher_auc"] is not None else ""
    rate = f"{s['samples_per_s']:,.0f} samples/s" if math.isfinite(s["samples_per_s"]) else "no steps"
    if compiling >= 0.1 and s["seconds"] > compiling and math.isfinite(s["samples_per_s"]):
        rate = (f"{s['samples_per_s'] * s['seconds'] / (s['seconds'] - compiling):,.0f} samples/s, leaving out "
                f"{compiling:.1f} s of compiling kernels")
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
    reporter = ProgressBar(config.output.progress) if lead else Reporter()
    try:
        check_startup(config)
        with first_compile.watching(reporter.say if lead else lambda line: None, FIRST_COMPILE_S) as compiling:
            reporter.compiling = compiling
            summary = train(config, reporter, comm)
    except TrainError as e:
        tell(f"{PROG}: error{where}: {e}")
        return e.exit_code
    except (StoreError, DataError) as e:  # a cache too small for a batch, a shard that went bad while read
        tell(f"{PROG}: error{where}: {e}")
        if several:
            # this rank's alone (say, the one rank whose table overflows): the others would wait in their next
            # collective for the whole timeout, so end them now
            comm.abort("stopped by the error above")
        return 1
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM, which tools/_entry.py raises as a KeyboardInterrupt
        tell(f"{PROG}: {str(e) or 'interrupted'}{where}; --resume continues from the last checkpoint, if one was "
             "written")
        return getattr(e, "exit_code", 130)
    if lead:
        print(summary_line(summary, compiling.seconds - reporter.compiled_before))
    return 0
