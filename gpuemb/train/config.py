"""TrainConfig: every setting of a training run, composed of the sections in ``sections.py``.

The sections' choices are the layers' registries (models, row rules, optimizers, schedules, codecs, precisions,
devices, placements), so the flags, their help and their checks follow whatever is registered, and adding, say, a
row rule touches the rule's own file alone. Each setting also has a key, its name in files and flat dicts, and a
flag made from the key; this module maps keys to sections.

A config comes from flags (``tools/train.py --batch-size 2048``), from a TOML or JSON file whose keys are the
flags without their dashes (``batch-size = 2048`` or ``batch_size = 2048``), or both: the defaults, then the
file, then the flags given on the command line; a run preset (``--preset mlperf-dcnv2``, ``recipes.RUN_PRESETS``)
sits between the defaults and the file. ``TrainConfig.of(model="dcn", steps=500)`` takes the same keys.
An unknown key, a value of the wrong type or out of range, and a combination that cannot work raise
:class:`ConfigError` naming the flag and what to use instead.

``None`` means "chosen for you": ``data=None`` is the model's default data (synthetic, or census-income for
MMoE), ``steps=None`` a step count that suits the data, ``eval_every=None`` a few evaluations a run.
"""
import dataclasses
import difflib
import json
import os
from dataclasses import dataclass, field

from gpuemb.autograd.plain import plain

from . import recipes
from .errors import ConfigError
from .sections import (CheckpointSettings, DataSettings, DistributedSettings, ModelSettings, OptimizationSettings,
                       OutputSettings, RunSettings, StoreSettings)
from .fields import default_of, flag_of, key_of


@dataclass(frozen=True)
class TrainConfig:
    """Every setting of a run, by section; see the module docstring, and ``tools/train.py --help`` for each one."""
    model: ModelSettings = field(default_factory=ModelSettings)
    data: DataSettings = field(default_factory=DataSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    optimization: OptimizationSettings = field(default_factory=OptimizationSettings)
    checkpoints: CheckpointSettings = field(default_factory=CheckpointSettings)
    output: OutputSettings = field(default_factory=OutputSettings)
    run: RunSettings = field(default_factory=RunSettings)
    distributed: DistributedSettings = field(default_factory=DistributedSettings)

    def __post_init__(self):
        # the combinations across sections; each section checked its own when it was made
        self.data.check_synthetic(self.data.synthetic and not (self.model.name == "mmoe" and self.data.source is None))
        o = self.optimization
        if (o.precision == "fp16" and self.distributed.sharding == "column"
                and o.embedding_optimizer == "rowwise_adagrad"):
            raise ConfigError("--sharding: column shards under rowwise_adagrad exchange their squared-gradient sums "
                              "during the backward, which a loss-scaled fp16 step holds back; use --sharding row or "
                              "table, or another --embedding-optimizer")

    # -- flat keys: files, flags and checkpoints name settings by key ------------------------------------------
    @classmethod
    def of(cls, **values):
        """A config from keys (``TrainConfig.of(model="dcn", steps=500)``), the rest at their defaults."""
        return cls.from_dict(values)

    def flat(self):
        """``{key: value}`` of every setting."""
        return {key: getattr(getattr(self, section), name) for key, (section, name) in KEYS.items()}

    def to_dict(self):
        """``{section: {key: value}}``: what a checkpoint records, as plain values."""
        return {s: {key_of(f): getattr(getattr(self, s), f.name) for f in dataclasses.fields(getattr(self, s))}
                for s in SECTIONS}

    @classmethod
    def from_dict(cls, values, where="config"):
        """A config from flat keys (flag names, dashes or underscores) or ``to_dict()``'s sections; the rest at
        their run preset's, if one is named, else their defaults."""
        return cls._build(recipes.with_preset(normalize(flatten(values), where)))

    @classmethod
    def from_file(cls, path, overrides=None):
        """The config of a TOML or JSON file, then ``overrides`` (keys to values) on top; a table setting
        (``model_args``) is the file's and the overrides' entries merged."""
        values = normalize(flatten(read_file(path)), os.fspath(path))
        overrides = normalize(overrides or {}, "the command line")
        for key in [k for k in overrides if FIELDS[k].metadata["kind"] == "dict"]:
            if isinstance(values.get(key), dict):
                overrides[key] = {**values[key], **overrides[key]}
        return cls._build(recipes.with_preset({**values, **overrides}))

    def replace(self, **values):
        """A copy with the settings of these keys changed."""
        return self._build({**self.flat(), **normalize(values, "replace")})

    @classmethod
    def _build(cls, flat):
        parts = {s: {} for s in SECTIONS}
        for key, value in flat.items():
            section, name = KEYS[key]
            parts[section][name] = value
        return cls(**{s: SECTIONS[s](**kw) for s, kw in parts.items()})


SECTIONS = {f.name: f.default_factory for f in dataclasses.fields(TrainConfig)}  # name -> section class
KEYS = {key_of(f): (s, f.name) for s, cls in SECTIONS.items() for f in dataclasses.fields(cls)}  # key -> field
FIELDS = {key: SECTIONS[s].field(name) for key, (s, name) in KEYS.items()}
GROUPS = tuple(SECTIONS)


def flag(key):
    """The command-line flag of a key: ``batch_size`` -> ``--batch-size``."""
    return flag_of(FIELDS[key])


def _aliases():
    """``{name: (key, inverted)}``: each key, and the flag's own spelling (``no_progress``, ``model_arg``)."""
    out = {}
    for key, f in FIELDS.items():
        out[key] = (key, False)
        spelled = flag_of(f).lstrip("-").replace("-", "_")
        out.setdefault(spelled, (key, f.metadata["kind"] == "bool" and spelled == "no_" + key))
    return out


ALIASES = _aliases()


def flatten(values):
    """Flat keys from a dict that may hold ``to_dict()``'s sections (a checkpoint's config) or flat keys."""
    out = {}
    for key, value in values.items():
        if key in SECTIONS and isinstance(value, dict):  # "model" is a key too, but its value is a name
            out.update(value)
        else:
            out[key] = value
    return out


def normalize(values, where):
    """``values`` with flag-style keys turned into keys; unknown keys raise ConfigError naming them."""
    out = {}
    for key, value in values.items():
        name = str(key).lstrip("-").replace("-", "_")
        if name not in ALIASES:
            close = [flag(ALIASES[n][0]) for n in difflib.get_close_matches(name, ALIASES, n=2)]
            hint = f" (did you mean {' or '.join(dict.fromkeys(close))}?)" if close else ""
            raise ConfigError(f"{where}: unknown key {key!r}{hint}; `tools/train.py --help` lists them all")
        name, inverted = ALIASES[name]
        kind = FIELDS[name].metadata["kind"]
        if value is True and FIELDS[name].metadata["bare"] is not None:
            value = FIELDS[name].metadata["bare"]
        if kind == "float" and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)  # TOML and JSON write 1 for 1.0
        if kind == "list" and isinstance(value, (str, tuple)):
            value = [value] if isinstance(value, str) else list(value)
        if inverted and isinstance(value, bool):
            value = not value
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
    except RecursionError:  # both parsers recurse per level of brackets
        raise ConfigError(f"--config {path}: nests lists or tables too deeply to read; a config needs a level or "
                          "two") from None
    if not isinstance(values, dict):
        raise ConfigError(f"--config {path}: holds a {type(values).__name__}; write a table of key = value")
    for key, value in values.items():  # TOML's dates and times, which a checkpoint's JSON could not record
        try:
            plain(value, f"--config {path}: {key}")
        except ValueError as e:
            raise ConfigError(str(e)) from None
    return values


def check_precision(precision, device):
    """Refuse reduced-precision compute where there is no GPU to run it (fp16 rows work everywhere)."""
    if precision != "fp32" and device == "cpu":
        raise ConfigError(f"--precision: {precision} runs on a GPU only (the CPU path computes in fp32); use "
                          "--precision fp32, or run on a GPU")


def as_it_ran(saved):
    """A checkpoint's config (by sections or flat) as flat keys, with each setting newer than the checkpoint whose
    default computes otherwise than the checkpoint's run did at what that run did (its ``before``): what a resume
    compares, and what a bundle of the checkpoint is built with."""
    saved = flatten(saved)
    return {**{k: f.metadata["before"] for k, f in FIELDS.items()
               if k not in saved and f.metadata["before"] is not None}, **saved}


def resume_differences(saved, config):
    """``[(key, saved value, value now)]`` of the settings that differ and that a resume must keep. ``saved``: a
    checkpoint's config, by sections or (written before the sections) flat."""
    now = config.flat()
    saved = as_it_ran(saved)
    # A setting newer than the checkpoint, but those as_it_ran knows, ran as its default. One whose default is None
    # ("chosen for you", e.g. by the model's recipe) ran as whatever this version chooses, which `now` holds.
    missing = {k: now[k] if default_of(f) is None else default_of(f) for k, f in FIELDS.items() if k not in saved}
    saved = {**saved, **missing}
    return [(k, saved[k], now[k]) for k, f in FIELDS.items()
            if not f.metadata["resumable"] and plain(saved[k]) != plain(now[k])]  # as a file saved them


__all__ = ["TrainConfig", "SECTIONS", "FIELDS", "GROUPS", "flag", "check_precision",
           "resume_differences", "as_it_ran"]
