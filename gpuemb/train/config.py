"""TrainConfig: every setting of a training run, as one frozen dataclass that checks itself.

A config comes from flags (``tools/train.py --batch-size 2048``), from a TOML or JSON file whose keys are the
flags without their dashes (``batch-size = 2048`` or ``batch_size = 2048``), or both: the defaults, then the
file, then the flags given on the command line. An unknown key, a value of the wrong type or out of range, and a
combination that cannot work raise :class:`ConfigError` naming the key and what to use instead.

``None`` means "chosen for you": ``data=None`` is the model's default data (synthetic, or census-income for
MMoE), ``steps=None`` a step count that suits the data, ``eval_every=None`` a few evaluations a run.
"""
import dataclasses
import difflib
import json
import math
import numbers
import os
from dataclasses import dataclass, field

from gpuemb.store.options import INIT_KINDS

from .errors import ConfigError

MODELS = ("dlrm", "dcn", "deepfm", "xdeepfm", "pnn", "wide_deep", "mmoe")
FORMATS = ("criteo", "avazu", "census", "csv")
PRESETS = ("quick", "small", "criteo")
STORES = ("device", "host", "ssd")
OPTIMIZERS = ("sgd", "adagrad", "adam", "adamw")
ROW_OPTIMIZERS = ("sgd", "adagrad", "rowwise_adagrad", "adam", "ftrl")
SCHEDULES = ("constant", "warmup_poly", "cosine", "step")
PRECISIONS = ("fp32", "fp16", "bf16")
EMBEDDING_DTYPES = ("fp32", "fp16")
DEVICES = ("auto", "cpu", "cuda")
TABLES = ("shared", "per-feature")
CODECS = ("fp32", "fp16", "bf16", "int8")  # gpuemb.kernels.codecs.CODECS, named here so a config needs no kernels
COMM_BACKENDS = ("auto", "mpi", "nccl", "local")
SHARDINGS = ("auto", "table", "row", "column")
GROUPS = ("model", "data", "store", "optimization", "checkpoints", "output", "run", "distributed")


def setting(default, help, group, kind=None, choices=None, low=None, high=None):
    """A field of TrainConfig: its default, help text, flag group and the checks of its value."""
    kind = kind or ("choice" if choices else type(default).__name__)
    meta = {"help": help, "group": group, "kind": kind, "choices": choices, "low": low, "high": high}
    if kind == "dict":
        return field(default_factory=dict, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class TrainConfig:
    """Every setting of a run; see the module docstring, and ``tools/train.py --help`` for each one."""

    # -- model
    model: str = setting("dlrm", "the model to train", "model", choices=MODELS)
    model_args: dict = setting(None, "a model hyperparameter, KEY=VALUE (VALUE read as JSON, else text); "
                               "repeat for more (docs/models.md lists them)", "model", kind="dict")
    embedding_dim: int = setting(16, "width D of every embedding row", "model", low=1)
    tables: str = setting("shared", "one table shared by all sparse features (one lookup a batch), or one "
                          "table per feature", "model", choices=TABLES)
    # -- data
    data: str = setting(None, "'synthetic', a folder or file of HDF5 shards, or raw files with --format "
                        "(default: synthetic; census-income for mmoe)", "data", kind="str")
    format: str = setting(None, "the raw files' format; they are converted to shards in a temp folder, with "
                          "--eval-fraction of the rows held out", "data", choices=FORMATS)
    label: list = setting(None, "csv: the label column(s)", "data", kind="list")
    dense: list = setting(None, "csv: the dense (numeric) columns", "data", kind="list")
    categorical: list = setting(None, "csv: the categorical columns", "data", kind="list")
    eval_fraction: float = setting(None, "raw files: the fraction of rows held out for evaluation (default 0.1; "
                                   "0.3 of mmoe's 200-row census sample)", "data", kind="float", low=0.0, high=1.0)
    eval_data: str = setting(None, "shards: the eval split's folder or file (default: the 'test' or 'val' "
                             "folder beside 'train')", "data", kind="str")
    preset: str = setting("quick", "synthetic: the data's shape; 'quick' is sized for a CPU run of about two "
                          "minutes, 'small' and 'criteo' are gpuemb.io.synthetic.PRESETS", "data", choices=PRESETS)
    train_rows: int = setting(None, "synthetic: rows in the training set, made as they are read (default "
                              "4,194,304, more than the default run's 800 batches of 4,096)", "data", kind="int", low=1)
    eval_rows: int = setting(100_000, "rows evaluated: the synthetic eval set's size, or a cap on the shards' "
                             "eval split", "data", low=1)
    # -- store
    store: str = setting("device", "where embedding rows live: device memory, host memory or an HDF5 file "
                         "(host and ssd need --cache-rows)", "store", choices=STORES)
    cache_rows: int = setting(0, "host/ssd: rows of the device cache (at least one batch's unique keys)",
                              "store", low=0)
    host_cache_rows: int = setting(0, "ssd: rows of the host cache between the device cache and the file",
                                   "store", low=0)
    ssd_dir: str = setting(None, "ssd: the folder of the tables' files (default: a temp folder)", "store",
                           kind="str")
    embedding_dtype: str = setting("fp32", "how embedding weights are stored in every tier and checkpoint: fp16 "
                                   "halves them, keeps the optimizer state fp32 and works on any device",
                                   "store", choices=EMBEDDING_DTYPES)
    # -- optimization
    optimizer: str = setting("adam", "the dense layers' optimizer", "optimization", choices=OPTIMIZERS)
    lr: float = setting(2e-3, "the dense layers' learning rate", "optimization", low=0.0)
    embedding_optimizer: str = setting("rowwise_adagrad", "the embedding rows' update rule (fused into the "
                                       "backward)", "optimization", choices=ROW_OPTIMIZERS)
    embedding_lr: float = setting(None, "the embedding rows' learning rate (default: the model's recipe, "
                                  "gpuemb/train/recipes.py: 0.2, or 0.05 for deepfm and xdeepfm)", "optimization",
                                  kind="float", low=0.0)
    embedding_init: str = setting(None, "how a new key's row is drawn (default: the model's recipe: uniform, or "
                                  "normal for deepfm and xdeepfm)", "optimization", choices=INIT_KINDS)
    embedding_init_scale: float = setting(None, "the uniform bound or normal std of new rows (default: the "
                                          "model's recipe: 1/sqrt(D), or 0.01 for deepfm and xdeepfm)",
                                          "optimization", kind="float", low=0.0)
    schedule: str = setting("constant", "the learning-rate schedule; it scales both learning rates",
                            "optimization", choices=SCHEDULES)
    warmup_steps: int = setting(None, "warmup_poly/cosine: steps of linear warmup (default 0)", "optimization",
                                kind="int", low=0)
    decay_start: int = setting(None, "warmup_poly: the step the decay starts (default: the end of warmup)",
                               "optimization", kind="int", low=0)
    decay_steps: int = setting(None, "warmup_poly/cosine: steps of the decay (default: to the last step)",
                               "optimization", kind="int", low=1)
    end_lr: float = setting(None, "warmup_poly/cosine: the learning rate at the end of the decay (default 0)",
                            "optimization", kind="float", low=0.0)
    step_size: int = setting(None, "step: steps between two drops of the learning rate", "optimization",
                             kind="int", low=1)
    gamma: float = setting(None, "step: the factor of each drop (default 0.1)", "optimization", kind="float",
                           low=0.0)
    batch_size: int = setting(None, "samples per step (default 4096, and for small files at most a tenth of "
                              "their training rows)", "optimization", kind="int", low=1)
    steps: int = setting(None, "steps to train in all, counting those before a resume (default: suited to "
                         "the data)", "optimization", kind="int", low=1)
    epochs: int = setting(None, "passes over the training data, instead of --steps", "optimization", kind="int",
                          low=1)
    precision: str = setting("fp32", "the MLPs' compute precision; fp16 and bf16 need a GPU, keep fp32 master "
                             "weights, and fp16 scales the loss (docs/precision.md)", "optimization",
                             choices=PRECISIONS)
    # -- checkpoints
    checkpoint_dir: str = setting(None, "where checkpoints go (step-<N> folders and a 'latest' file)",
                                  "checkpoints", kind="str")
    checkpoint_every: int = setting(0, "steps between checkpoints; 0 saves one at the end only",
                                    "checkpoints", low=0)
    keep_checkpoints: int = setting(2, "complete checkpoints kept; older ones are removed", "checkpoints",
                                    low=1)
    resume: str = setting(None, "continue from a checkpoint: 'latest' in --checkpoint-dir, or a path",
                          "checkpoints", kind="str")
    # -- output
    metrics_out: str = setting(None, "write train and eval metrics to this file as JSON lines", "output",
                               kind="str")
    plot: str = setting(None, "draw the loss and AUC curves to this PNG (needs matplotlib)", "output",
                        kind="str")
    eval_every: int = setting(None, "steps between evaluations (default: four a run), and one at the end",
                              "output", kind="int", low=1)
    log_every: int = setting(50, "steps between training metric lines", "output", low=1)
    progress: bool = setting(True, "show a progress bar", "output")
    # -- run
    seed: int = setting(0, "seeds the model, the data order and the synthetic data", "run", low=0)
    device: str = setting(None, "overrides GPUEMB_DEVICE (default: GPUEMB_DEVICE, else auto)", "run",
                          choices=DEVICES)
    pipeline: bool = setting(True, "prepare the next batch (its keys, and its rows in the device cache) while this "
                             "one computes; --no-pipeline runs them one after the other, with the same results",
                             "run")
    # -- distributed (under mpiexec; a launch of one process ignores these)
    comm_backend: str = setting("auto", "how ranks talk: auto (one process: local; several: nccl with GPUs, else "
                                "mpi), or mpi, nccl, local", "distributed", choices=COMM_BACKENDS)
    comm_codec: str = setting("fp32", "the wire format of the forward all-to-all of embedding rows (int8: a "
                              "per-row absmax scale, D + 4 bytes a row)", "distributed", choices=CODECS)
    comm_codec_backward: str = setting(None, "the wire format of the backward all-to-all of their gradients "
                                       "(default: --comm-codec)", "distributed", choices=CODECS)
    sharding: str = setting("auto", "how tables are placed on the ranks: auto (the planner), or every table "
                            "table-, row- or column-wise", "distributed", choices=SHARDINGS)

    def __post_init__(self):
        self.validate()

    # -- checks -------------------------------------------------------------------------------------------------
    def validate(self):
        """Check every field, then the combinations; raise ConfigError naming the first key that is wrong."""
        for f in dataclasses.fields(self):
            _check_value(f, getattr(self, f.name))
        self._check_combinations()
        return self

    def _check_combinations(self):
        def given(*names):
            return [n for n in names if getattr(self, n) not in (None, [], {})]

        def fail(key, message):
            raise ConfigError(f"{flag(key)}: {message}")

        if self.steps is not None and self.epochs is not None:
            fail("epochs", "give --steps or --epochs, not both")
        synthetic = self.data in (None, "synthetic")
        if self.format and synthetic:
            fail("format", "reads raw files; give their paths with --data")
        if self.format == "csv" and not self.label:
            fail("label", "--format csv needs the label column(s); name them with --label")
        for key in given("label", "dense", "categorical"):
            if self.format != "csv":
                fail(key, "names columns of --format csv files only")
        if not synthetic or self.model == "mmoe" and self.data is None:
            for key in given("train_rows"):
                fail(key, "sizes synthetic data; --data here is not synthetic")
            if self.preset != "quick":
                fail("preset", "shapes synthetic data; --data here is not synthetic")
        if self.eval_data and (synthetic or self.format):
            fail("eval_data", "names the eval shards of shard data (--data a shard folder or file)")
        if self.eval_fraction is not None and not 0 < self.eval_fraction < 1:
            fail("eval_fraction", f"{self.eval_fraction!r}; hold out a fraction strictly between 0 and 1")
        if self.store == "device":
            for key in given("ssd_dir") + [k for k in ("cache_rows", "host_cache_rows") if getattr(self, k)]:
                fail(key, "applies to --store host or ssd; with --store device drop it")
        elif self.cache_rows < 1:
            fail("cache_rows", f"--store {self.store} computes on device rows: set --cache-rows to at least the "
                 "unique keys of one batch (e.g. --cache-rows 1000000)")
        if self.store != "ssd":
            for key in given("ssd_dir") + (["host_cache_rows"] if self.host_cache_rows else []):
                fail(key, "applies to --store ssd only")
        knobs = {"constant": (), "warmup_poly": ("warmup_steps", "decay_start", "decay_steps", "end_lr"),
                 "cosine": ("warmup_steps", "decay_steps", "end_lr"), "step": ("step_size", "gamma")}
        for key in given("warmup_steps", "decay_start", "decay_steps", "end_lr", "step_size", "gamma"):
            if key not in knobs[self.schedule]:
                fail(key, f"does not apply to --schedule {self.schedule}; it sets "
                     + " or ".join(s for s, k in knobs.items() if key in k))
        if self.schedule == "step" and self.step_size is None:
            fail("step_size", "--schedule step needs --step-size (steps between two drops)")
        if self.resume == "latest" and not self.checkpoint_dir:
            fail("resume", "'latest' is looked up in --checkpoint-dir; give that folder, or the checkpoint's path")
        if self.checkpoint_every and not self.checkpoint_dir:
            fail("checkpoint_every", "needs --checkpoint-dir, the folder to write checkpoints to")
        if self.precision == "fp16" and self.sharding == "column" and self.embedding_optimizer == "rowwise_adagrad":
            fail("sharding", "column shards under rowwise_adagrad exchange their squared-gradient sums during the "
                 "backward, which a loss-scaled fp16 step holds back; use --sharding row or table, or another "
                 "--embedding-optimizer")
        for key in ("lr", "embedding_lr"):
            if getattr(self, key) is not None and getattr(self, key) <= 0:
                fail(key, f"{getattr(self, key)!r}; use a learning rate > 0")

    # -- conversions --------------------------------------------------------------------------------------------
    def to_dict(self):
        """Every field as plain Python values (what a checkpoint records)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, values, where="config"):
        """A config from ``{key: value}`` (flag names, dashes or underscores), the rest at their defaults."""
        return cls(**normalize(values, where))

    @classmethod
    def from_file(cls, path, overrides=None):
        """The config of a TOML or JSON file, then ``overrides`` (a dict of keys to values) on top; the
        ``model_args`` of both are merged."""
        values = normalize(read_file(path), os.fspath(path))
        overrides = normalize(overrides or {}, "the command line")
        if "model_args" in overrides and isinstance(values.get("model_args"), dict):
            overrides["model_args"] = {**values["model_args"], **overrides["model_args"]}
        return cls(**{**values, **overrides})

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}


def flag(name):
    """The command-line flag of a field: ``batch_size`` -> ``--batch-size``."""
    special = {"model_args": "--model-arg", "progress": "--no-progress", "pipeline": "--no-pipeline"}
    return special.get(name, "--" + name.replace("_", "-"))


def _check_value(f, value):
    m = f.metadata
    if value is None:
        if f.default is None:
            return
        raise ConfigError(f"{flag(f.name)}: needs a value; leave the key out for its default")
    kind, where = m["kind"], flag(f.name)
    ok = {"int": isinstance(value, numbers.Integral) and not isinstance(value, bool),
          "float": isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value),
          "str": isinstance(value, str) and value != "", "choice": value in (m["choices"] or ()),
          "bool": isinstance(value, bool), "dict": isinstance(value, dict) and all(isinstance(k, str) for k in value),
          "list": isinstance(value, list) and value != [] and all(isinstance(v, str) and v for v in value)}[kind]
    if not ok:
        want = {"int": "an integer", "float": "a finite number", "str": "a non-empty string",
                "choice": "one of " + ", ".join(m["choices"] or ()), "bool": "true or false",
                "dict": "a table of KEY = VALUE", "list": "a non-empty list of names"}[kind]
        raise ConfigError(f"{where}: {value!r} is not {want}")
    if m["low"] is not None and value < m["low"]:
        raise ConfigError(f"{where}: {value!r} is below {m['low']}; use a value >= {m['low']}")
    if m["high"] is not None and value > m["high"]:
        raise ConfigError(f"{where}: {value!r} is above {m['high']}; use a value <= {m['high']}")


def normalize(values, where):
    """``values`` with flag-style keys turned into field names; unknown keys raise ConfigError naming them."""
    out = {}
    for key, value in values.items():
        name = str(key).lstrip("-").replace("-", "_")
        name = {"model_arg": "model_args", "no_progress": "progress", "no_pipeline": "pipeline"}.get(name, name)
        if name not in FIELDS or name == "config":
            close = [flag(n) for n in difflib.get_close_matches(name, FIELDS, n=2)]
            hint = f" (did you mean {' or '.join(close)}?)" if close else ""
            raise ConfigError(f"{where}: unknown key {key!r}{hint}; `tools/train.py --help` lists them all")
        kind = FIELDS[name].metadata["kind"]
        if name == "resume" and value is True:
            value = "latest"
        if kind == "float" and isinstance(value, numbers.Integral) and not isinstance(value, bool):
            value = float(value)  # TOML and JSON write 1 for 1.0
        if kind == "list" and isinstance(value, str):
            value = [value]
        if kind == "list" and isinstance(value, tuple):
            value = list(value)
        if name in ("progress", "pipeline") and str(key).lstrip("-").replace("-", "_") == "no_" + name:
            value = not value if isinstance(value, bool) else value
        out[name] = value
    return out


def read_file(path):
    """The key-value table of a TOML (``.toml``) or JSON (``.json``) config file; ConfigError naming the file."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".toml", ".json"):
        raise ConfigError(f"--config {path}: name a .toml or .json file")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ConfigError(f"--config {path}: cannot be read ({e.strerror or e}); check the path") from None
    try:
        if ext == ".json":
            values = json.loads(raw)
        else:
            import tomllib  # Python 3.11+
            values = tomllib.loads(raw.decode())
    except ImportError:
        raise ConfigError(f"--config {path}: reading TOML needs Python 3.11 or later; write the config as "
                          ".json") from None
    except (ValueError, UnicodeDecodeError) as e:  # json.JSONDecodeError and tomllib.TOMLDecodeError
        raise ConfigError(f"--config {path}: is not valid {ext[1:].upper()}: {e}") from None
    if not isinstance(values, dict):
        raise ConfigError(f"--config {path}: holds a {type(values).__name__}; write a table of key = value")
    return values


def check_precision(precision, device):
    """Refuse reduced-precision compute where there is no GPU to run it (fp16 rows work everywhere)."""
    if precision != "fp32" and device == "cpu":
        raise ConfigError(f"--precision: {precision} runs on a GPU only (the CPU path computes in fp32); use "
                          "--precision fp32, or run on a GPU")


# Fields a resumed run may change: how long it runs, what it writes, where the rows live, and the learning rates
# (to continue past a divergence), not what it computes.
RESUMABLE_CHANGES = frozenset({"lr", "embedding_lr",
    "steps", "epochs", "checkpoint_dir", "checkpoint_every", "keep_checkpoints", "resume", "metrics_out", "plot",
    "eval_every", "eval_rows", "eval_data", "log_every", "progress", "pipeline", "device", "store", "cache_rows",
    "host_cache_rows", "ssd_dir",
    # the wire formats and the placement: checkpoints reshard across world sizes and plans, and a codec only
    # rounds what travels
    "comm_backend", "comm_codec", "comm_codec_backward", "sharding"})


def resume_differences(saved, config):
    """``[(field, saved value, value now)]`` of the fields that differ and that a resume must keep."""
    now = config.to_dict()
    # A setting newer than the checkpoint ran as its default. One whose default is None ("chosen for you", e.g.
    # by the model's recipe) ran as whatever this version chooses, which is what `now` holds.
    missing = {k: now[k] if _default(k) is None else _default(k) for k in FIELDS if k not in saved}
    saved = {**saved, **missing}
    return [(k, saved[k], now[k]) for k in FIELDS
            if k not in RESUMABLE_CHANGES and _plain(saved[k]) != _plain(now[k])]


def _default(name):
    f = FIELDS[name]
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def _plain(value):
    return json.loads(json.dumps(value))  # tuples and lists, ints and floats compare as a file saved them
