"""The data of a run: a training and an eval source for the loader, their shapes, and the best reachable AUC.

Three kinds of ``--data``:

- ``synthetic`` (the default): rows made on the fly from a planted teacher (:mod:`gpuemb.io.synthetic`); the
  eval set is the ``test`` split, and the teacher's AUC on it is the best any model can reach;
- HDF5 shards (a folder holding ``train/`` and ``test/`` or ``val/``, or ``--eval-data`` beside them);
- raw files with ``--format``: converted to shards in a temporary folder, ``--eval-fraction`` of the rows
  held out by the converter's seeded hash split.

MMoE's default is the census-income sample in ``tests/io/data`` (two tasks, 200 rows: a smoke run of the real
data's shape, not a benchmark).
"""
import glob
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from gpuemb.io import synthetic
from gpuemb.io.convert import ConvertOptions, convert
from gpuemb.io.dataset_manifest import one_conversion
from gpuemb.io.formats import FORMATS, schema_for
from gpuemb.io.reader import ReadOptions
from gpuemb.io.errors import DataError, SchemaError, ShardError
from gpuemb.io.shards import ShardSource, is_hdf5, list_shards

from .errors import ConfigError, TrainError

# Criteo's 26 tables capped at 1,000 ids: the default DLRM run (800 steps of 4,096) meets each id often enough to
# end within 0.02 of the teacher's AUC (measured on a 2-core CPU: 0.8216 against 0.8370 on the 100k eval rows,
# in 137 to 160 s on a shared machine; 1,000 steps reach 0.8250).
QUICK = synthetic.SyntheticConfig(cardinalities=tuple(min(c, 1000) for c in synthetic.CRITEO_CARDINALITIES))
CENSUS_SAMPLE = Path(__file__).resolve().parents[2] / "tests" / "io" / "data" / "census_income_sample.csv"


@dataclass
class DataSet:
    """What the loop needs of the data: sources for the loader, and the shapes the model is built for."""
    train: object  # a loader source: SyntheticSource or ShardSource
    eval: object
    n_dense: int
    n_features: int  # sparse features, one id each
    label_names: tuple
    sparse_names: tuple
    description: str
    teacher_auc: float = None  # the planted teacher's AUC on the eval rows, where it is known
    hotness: tuple = None  # keys per feature in every row where some feature has several (multi-hot), else None
    synthetic: bool = False
    _open: list = field(default_factory=list)  # shard sources to close

    @property
    def n_tasks(self):
        return len(self.label_names)

    def close(self):
        for source in self._open:
            source.close()
        self._open = []


def synthetic_config(config):
    """The SyntheticConfig of ``--preset`` with the run's seed."""
    base = QUICK if config.data.preset == "quick" else synthetic.PRESETS[config.data.preset]
    return replace(base, seed=config.run.seed)


def _synthetic(config, train_rows):
    return synthetic_data(synthetic_config(config), train_rows, config.data.eval_rows, config.data.preset)


def synthetic_data(cfg, train_rows, eval_rows, name="custom"):
    """A DataSet of ``train_rows`` and ``eval_rows`` synthetic rows of the SyntheticConfig ``cfg``, called ``name``
    in its description (``--preset``'s, or a tool's own shape)."""
    train = synthetic.SyntheticSource(cfg, train_rows, "train")
    eval_ = synthetic.SyntheticSource(cfg, eval_rows, "test")
    layout = train.layout
    return DataSet(train, eval_, cfg.n_dense, len(cfg.cardinalities), layout.label_names, layout.sparse_names,
                   f"synthetic '{name}' data ({train_rows:,} training rows, {eval_rows:,} eval rows)",
                   synthetic.teacher_auc(cfg, eval_rows, "test"), synthetic=True,
                   hotness=cfg.hot if max(cfg.hot) > 1 else None)


def _raw_paths(pattern):
    paths = sorted(glob.glob(os.path.expanduser(pattern))) if glob.has_magic(pattern) else [pattern]
    missing = [p for p in paths if not os.path.isfile(p)]
    if not paths or missing:
        raise ConfigError(f"--data: {missing[0] if missing else pattern} is not a file; give a raw data file "
                          "(or a glob pattern of several)")
    return paths


def _raw(config, workdir, data, fmt, eval_fraction):
    paths = _raw_paths(data)
    out = os.path.join(workdir, "shards")
    f = eval_fraction
    d = config.data
    schema = schema_for(fmt, paths, label=d.label, dense=d.dense, categorical=d.categorical)
    # the run's own scratch folder: whatever a conversion left there before is this run's to replace
    options = ConvertOptions(split=(1 - f, 0.0, f), seed=config.run.seed, read=ReadOptions(soft_labels=d.soft_labels))
    report = convert(paths, out, schema, options, overwrite=True)
    for split in ("train", "test"):
        if not report.rows.get(split):
            raise ConfigError(f"--data {data}: the conversion left no {split} rows ({report}); give more rows "
                              "or another --eval-fraction")
    skipped = f"; {report.parse.summary()}" if report.parse.bad else ""
    return _shards(config, report.paths["train"], report.paths["test"],
                   f"{fmt} files {data} ({report.rows['train']:,} train, "
                   f"{report.rows['test']:,} eval rows{skipped})")


def _shard_paths(config):
    """(train paths, eval paths) of ``--data`` (and ``--eval-data``) shards."""
    location = config.data.source
    if not os.path.exists(location):
        raise ConfigError(f"--data: {location} does not exist; give 'synthetic', a shard folder or file, or raw "
                          "files with --format")
    if os.path.isfile(location) and not is_hdf5(location):  # a raw file, which only --format says how to read
        raise ConfigError(f"--data {location}: is a file, not HDF5 shards; give its --format "
                          f"({', '.join(FORMATS)}) to convert it, or give the converter's output folder")
    if os.path.isdir(os.path.join(location, "train")):
        train = list_shards(location, "train")
        if config.data.eval_data is None:
            for split in ("test", "val"):
                if os.path.isdir(os.path.join(location, split)):
                    one_conversion(os.path.join(location, "train"), os.path.join(location, split))
                    return train, list_shards(location, split)
            raise ConfigError(f"--data {location}: holds no 'test' or 'val' folder to evaluate on; give the eval "
                              "shards with --eval-data")
    else:
        train = list_shards(location)
        if config.data.eval_data is None:
            raise ConfigError(f"--data {location}: shards without a 'train' folder; give the eval shards with "
                              "--eval-data")
    return train, list_shards(config.data.eval_data)


def _shards(config, train_paths, eval_paths, description):
    train = ShardSource(train_paths)
    try:
        eval_ = ShardSource(eval_paths)
    except Exception:
        train.close()
        raise
    data = DataSet(train, eval_, len(train.layout.dense_names), len(train.layout.sparse_names),
                   train.layout.label_names, train.layout.sparse_names, description, _open=[train, eval_])
    try:
        if eval_.layout != train.layout:
            raise ConfigError("--eval-data: the eval shards' columns differ from the training shards'; "
                              "evaluate on shards of the same data set")
        hot = train.layout.hotness
        # fixed multi-hot comes as a matrix the model is told the hotness of; jagged features (hotness 0) come from
        # the loader as JaggedFeatures, which every collection pools as they are
        data.hotness = tuple(hot) if hot and max(hot) > 1 and not train.layout.jagged_names else None
        meta = eval_.infos[0].layout.meta
        if "teacher_auc" in meta and eval_.n_rows <= config.data.eval_rows:
            data.teacher_auc = float(meta["teacher_auc"])  # synthetic shards record their teacher's AUC
    except Exception:
        data.close()
        raise
    return data


def uses_synthetic(config):
    """Whether ``config`` trains on the synthetic data: no raw files, no shards, and not mmoe's census default."""
    return config.data.format is None and config.data.source in (None, "synthetic") and not (
        config.data.source is None and config.model.name == "mmoe")


def open_data(config, workdir, train_rows):
    """The DataSet of ``config``; raw files are converted under ``workdir``. ``train_rows``: synthetic only."""
    try:
        if config.data.format or (config.data.source is None and config.model.name == "mmoe"):
            if config.data.source is None and not CENSUS_SAMPLE.is_file():
                raise ConfigError(f"--data: mmoe's default data {CENSUS_SAMPLE.name} is not in this install; "
                                  "give census-income files with --data FILE --format census")
            if config.data.source is None:  # enough held-out rows of the small sample for both tasks to have positives
                return _raw(config, workdir, str(CENSUS_SAMPLE), "census", config.data.eval_fraction or 0.3)
            return _raw(config, workdir, config.data.source, config.data.format, config.data.eval_fraction or 0.1)
        if uses_synthetic(config):
            return _synthetic(config, train_rows)
        train, eval_ = _shard_paths(config)
        return _shards(config, train, eval_, f"shards {config.data.source} ({len(train)} train, {len(eval_)} eval "
                       "files)")
    except (ShardError, SchemaError) as e:
        raise ConfigError(f"--data: {e}") from None
    except DataError as e:
        raise TrainError(f"--data: {e}") from None
