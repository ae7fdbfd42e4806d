"""The sections of a run config: each a frozen dataclass of settings that checks itself, its choices the layers'.

``model``, ``data``, ``store``, ``optimization``, ``checkpoints``, ``output``, ``run`` and ``distributed``; their
choices are the layers' registries (``gpuemb.models.MODELS``, ``gpuemb.optim.RULES``, ``OPTIMIZERS`` and
``SCHEDULES``, the codecs, precisions, devices and placements), and their combinations are checked by the layers'
own objects where they have one (``StoreOptions`` for where rows live, a schedule's ``run_settings``). ``config.py``
composes them into ``TrainConfig``.
"""
from dataclasses import dataclass

from gpuemb import models, optim
from gpuemb.autograd import backend
from gpuemb.autograd.checks import SettingError
from gpuemb.comm import BACKENDS
from gpuemb.comm.link import parse_link
from gpuemb.io.formats import FORMATS, NAMED_COLUMNS
from gpuemb.io.synthetic import PRESETS as SYNTHETIC_PRESETS
from gpuemb.kernels.codecs import CODECS
from gpuemb.kernels.mlp import PRECISIONS
from gpuemb.sharding.spec import SHARDINGS
from gpuemb.store.options import DRAWS, INIT_KINDS, PLACEMENTS, POLICIES, SHORT_DTYPES, EvictionRule, StoreOptions
from gpuemb.store.rounding import ROUNDINGS
from gpuemb.store.scores import SCORES

from .fields import Section, flag_of, setting

PRESETS = ("quick", *SYNTHETIC_PRESETS)  # quick: gpuemb.train.data.QUICK, sized for a CPU run
TABLES = ("shared", "per-feature")
EVICT_FLAGS = {"evict_ttl": "ttl_steps", "evict_min_count": "min_count", "evict_max_l2": "max_l2",
               "evict_score": "score", "evict_below": "below"}  # -> EvictionRule
RUN_SHARDINGS = tuple(s for s in SHARDINGS if s != "data")  # every table replicated is no sharding at all


@dataclass(frozen=True)
class ModelSettings(Section):
    name: str = setting("dlrm", "the model to train", choices=models.MODELS, key="model")
    args: dict = setting(None, "a model hyperparameter, KEY=VALUE (VALUE read as JSON, else text); repeat for more "
                         "(docs/models.md lists them)", kind="dict", key="model_args", flag="--model-arg")
    embedding_dim: int = setting(16, "width D of every embedding row (but those given a --table-dim)", low=1)
    tables: str = setting("shared", "one table shared by all sparse features (one lookup a batch), or one table "
                          "per feature", choices=TABLES)
    table_dims: dict = setting(None, "per-feature tables: a feature's own dim, NAME=DIM (NAME its sparse column, "
                               "C1..C26 on the synthetic data); repeat for more, the others keep --embedding-dim. "
                               "For the models that concatenate the rows: dcn, wide_deep, mmoe", kind="dict",
                               flag="--table-dim")

    def check(self):
        bad = {k: v for k, v in self.table_dims.items() if isinstance(v, bool) or not isinstance(v, int) or v < 1}
        if bad:
            name, value = next(iter(bad.items()))
            self.fail("table_dims", f"{name}={value!r}; give each feature's dim as an int >= 1, NAME=DIM")
        if self.table_dims and self.tables != "per-feature":
            self.fail("table_dims", "gives features dims of their own, which needs a table per feature; add "
                      "--tables per-feature")


@dataclass(frozen=True)
class DataSettings(Section):
    source: str = setting(None, "'synthetic', a folder or file of HDF5 shards, or raw files with --format "
                          "(default: synthetic; census-income for mmoe)", kind="str", key="data")
    format: str = setting(None, "the raw files' format; they are converted to shards in a temp folder, with "
                          "--eval-fraction of the rows held out", choices=FORMATS)
    label: list = setting(None, "csv: the label column(s)", kind="list")
    dense: list = setting(None, "csv: the dense (numeric) columns", kind="list")
    categorical: list = setting(None, "csv: the categorical columns", kind="list")
    soft_labels: bool = setting(False, "raw files: labels may be any value in [0, 1], not only 0 or 1 (another "
                                "is a bad line either way)")
    eval_fraction: float = setting(None, "raw files: the fraction of rows held out for evaluation (default 0.1; "
                                   "0.3 of mmoe's 200-row census sample)", kind="float", low=0.0, high=1.0)
    eval_data: str = setting(None, "shards: the eval split's folder or file (default: the 'test' or 'val' folder "
                             "beside 'train')", kind="str", resumable=True)
    preset: str = setting("quick", "synthetic: the data's shape; 'quick' is sized for a CPU run of about two "
                          "minutes, the others are gpuemb.io.synthetic.PRESETS; mlperf-dcnv2 also sets the model, "
                          "dims and rules of MLPerf's DLRM-DCNv2, under the flags given (docs/models.md)",
                          choices=PRESETS)
    train_rows: int = setting(None, "synthetic: rows in the training set, made as they are read (default "
                              "4,194,304, more than the default run's 800 batches of 4,096)", kind="int", low=1)
    eval_rows: int = setting(100_000, "rows evaluated: the synthetic eval set's size, or a cap on the shards' eval "
                             "split", low=1, resumable=True)

    @property
    def synthetic(self):
        return self.source in (None, "synthetic")

    def check(self):
        if self.format and self.synthetic:
            self.fail("format", "reads raw files; give their paths with --data")
        if self.format in NAMED_COLUMNS and not self.label:
            self.fail("label", f"--format {self.format} needs the label column(s); name them with --label")
        for name in self.given("label", "dense", "categorical"):
            if self.format not in NAMED_COLUMNS:
                self.fail(name, f"names columns of --format {' or '.join(NAMED_COLUMNS)} files only")
        if self.eval_data and (self.synthetic or self.format):
            self.fail("eval_data", "names the eval shards of shard data (--data a shard folder or file)")
        if self.eval_fraction is not None and not 0 < self.eval_fraction < 1:
            self.fail("eval_fraction", f"{self.eval_fraction!r}; hold out a fraction strictly between 0 and 1")

    def check_synthetic(self, synthetic):
        """The settings of synthetic data refused where the data is not synthetic."""
        if not synthetic:
            for name in self.given("train_rows"):
                self.fail(name, "sizes synthetic data; --data here is not synthetic")
            if self.preset != "quick":
                self.fail("preset", "shapes synthetic data; --data here is not synthetic")


@dataclass(frozen=True)
class StoreSettings(Section):
    placement: str = setting("device", "where embedding rows live: device memory, host memory or an HDF5 file (host "
                             "and ssd need --cache-rows)", choices=PLACEMENTS, key="store", resumable=True)
    cache_rows: int = setting(0, "host/ssd: rows of the device cache (at least one batch's unique keys)", low=0,
                              resumable=True)
    host_cache_rows: int = setting(0, "ssd: rows of the host cache between the device cache and the file", low=0,
                                   resumable=True)
    ssd_dir: str = setting(None, "ssd: the folder of the tables' files (default: a temp folder)", kind="str",
                           resumable=True)
    # which rows a cache holds changes where rows are read from, never what a step computes: a resume may change it
    cache_policy: str = setting(None, "host/ssd: which rows a full cache evicts, the least recently (lru) or least "
                                "frequently (lfu) used (default lru)", choices=POLICIES, resumable=True)
    embedding_dtype: str = setting("fp32", "how embedding weights are stored in every tier and checkpoint: fp16 "
                                   "halves them, keeps the optimizer state fp32 and works on any device",
                                   choices=SHORT_DTYPES)
    admit_after: int = setting(None, "a key gets its own row once it has been in this many batches, reading zeros "
                               "and taking no update before (default: at once; docs/store.md, 'Admission')",
                               kind="int", low=1)
    evict_every: int = setting(None, "update batches between two evictions of the keys that meet every --evict-* "
                               "criterion given (docs/store.md, 'Eviction')", kind="int", low=1)
    evict_ttl: int = setting(None, "--evict-every: evict keys not updated in this many update batches", kind="int",
                             low=1)
    evict_min_count: int = setting(None, "--evict-every: evict keys updated fewer times than this", kind="int",
                                   low=1)
    evict_max_l2: float = setting(None, "--evict-every: evict keys whose weights' L2 norm is below this",
                                  kind="float", low=0.0)
    evict_score: str = setting(None, "--evict-every: evict keys whose score is below --evict-below: l2 (their "
                               "weights' L2 norm), count (their updates), recency (minus the update batches since "
                               "their last), or a score registered in gpuemb.store.scores", choices=SCORES)
    evict_below: float = setting(None, "--evict-score: the threshold under which a key is evicted", kind="float")
    row_rounding: str = setting("nearest", "fp16: how updated weights are rounded to fp16; stochastic keeps updates "
                                "below half an fp16 step in expectation, drawn from the seed, key, update count and "
                                "column, so runs and resumes stay reproducible (docs/store.md, 'float16 rows')",
                                choices=ROUNDINGS)

    def check(self):
        # where rows live is the store's own setting: StoreOptions checks the combinations, named here by their flags
        path = (self.ssd_dir or "a temporary folder") if self.placement == "ssd" else self.ssd_dir
        try:
            self.options(path)
        except SettingError as e:
            self.fail({"ssd_path": "ssd_dir"}.get(e.name, e.name), e.message)
        if self.cache_policy is not None and self.placement == "device":
            self.fail("cache_policy", "chooses what a full cache evicts, and --store device has none; drop it, or "
                      "use --store host or ssd with --cache-rows")
        if self.row_rounding != "nearest" and self.embedding_dtype != "fp16":
            self.fail("row_rounding", f"{self.row_rounding} rounds fp16 weights; add --embedding-dtype fp16")
        criteria = self.given(*EVICT_FLAGS)
        if criteria and self.evict_every is None:
            self.fail(criteria[0], "is applied every --evict-every update batches; give --evict-every too")
        if self.evict_every is not None and not criteria:
            self.fail("evict_every", "evicts the keys that meet --evict-ttl, --evict-min-count, --evict-max-l2 or "
                      "--evict-score; give at least one")
        try:
            self.eviction()
        except SettingError as e:
            self.fail({v: k for k, v in EVICT_FLAGS.items()}.get(e.name, "evict_every"), e.message)

    def options(self, ssd_path=None):
        """The ``StoreOptions`` of these settings (``ssd_path``: a table's file, for an ssd home)."""
        return StoreOptions(self.placement, self.cache_rows, self.host_cache_rows, ssd_path=ssd_path,
                            policy=self.cache_policy or StoreOptions.policy)

    def eviction(self):
        """The ``EvictionRule`` of the --evict-* flags, or None."""
        given = {rule_field: getattr(self, name) for name, rule_field in EVICT_FLAGS.items()}
        return EvictionRule(**given) if self.evict_every is not None else None


@dataclass(frozen=True)
class OptimizationSettings(Section):
    optimizer: str = setting("adam", "the dense layers' optimizer", choices=optim.OPTIMIZERS)
    lr: float = setting(2e-3, "the dense layers' learning rate", low=0.0, resumable=True)
    embedding_optimizer: str = setting("rowwise_adagrad", "the embedding rows' update rule (fused into the "
                                       "backward)", choices=optim.RULES)
    embedding_lr: float = setting(None, "the embedding rows' learning rate (default: the model's recipe, "
                                  "gpuemb/train/recipes.py: 0.2, or 0.05 for deepfm and xdeepfm)", kind="float",
                                  low=0.0, resumable=True)
    embedding_init: str = setting(None, "how a new key's row is drawn (default: the model's recipe: uniform, or "
                                  "normal for deepfm and xdeepfm)", choices=INIT_KINDS)
    embedding_init_scale: float = setting(None, "the uniform bound or normal std of new rows (default: the model's "
                                          "recipe: 1/sqrt(D), or 0.01 for deepfm and xdeepfm)", kind="float",
                                          low=0.0)
    embedding_init_draw: int = setting(DRAWS[-1], "the stream of new rows' random draws: 2, four columns a Philox "
                                       "call; 1, one, as runs before 2026-11-28 drew (a checkpoint from then resumes "
                                       "with 1)", low=DRAWS[0], high=DRAWS[-1], before=DRAWS[0])
    schedule: str = setting("constant", "the learning-rate schedule; it scales both learning rates",
                            choices=optim.SCHEDULES)
    warmup_steps: int = setting(None, "warmup_poly/cosine: steps of linear warmup (default 0)", kind="int", low=0)
    decay_start: int = setting(None, "warmup_poly: the step the decay starts (default: the end of warmup)",
                               kind="int", low=0)
    decay_steps: int = setting(None, "warmup_poly/cosine: steps of the decay (default: to the last step)",
                               kind="int", low=1)
    end_lr: float = setting(None, "warmup_poly/cosine: the learning rate at the end of the decay (default 0)",
                            kind="float", low=0.0)
    step_size: int = setting(None, "step: steps between two drops of the learning rate", kind="int", low=1)
    gamma: float = setting(None, "step: the factor of each drop (default 0.1)", kind="float", low=0.0)
    batch_size: int = setting(None, "samples per step (default 4096, and for small files at most a tenth of their "
                              "training rows)", kind="int", low=1)
    steps: int = setting(None, "steps to train in all, counting those before a resume (default: suited to the "
                         "data)", kind="int", low=1, resumable=True)
    epochs: int = setting(None, "passes over the training data, instead of --steps", kind="int", low=1,
                          resumable=True)
    precision: str = setting("fp32", "the matmuls' compute precision (MLPs, DCN-v2's crosses); fp16, bf16 and tf32 "
                             "need a GPU and keep fp32 master weights, and fp16 scales the loss (docs/precision.md)",
                             choices=PRECISIONS)

    def check(self):
        if self.steps is not None and self.epochs is not None:
            self.fail("epochs", "give --steps or --epochs, not both")
        schedules = optim.SCHEDULES
        for name in self.given(*{n for cls in schedules.values() for n in cls.run_settings}):
            if name not in schedules[self.schedule].run_settings:
                self.fail(name, f"does not apply to --schedule {self.schedule}; it sets "
                          + " or ".join(s for s, cls in schedules.items() if name in cls.run_settings))
        for name in schedules[self.schedule].required_settings:
            if getattr(self, name) is None:
                self.fail(name, f"--schedule {self.schedule} needs {flag_of(self.field(name))}")
        for name in ("lr", "embedding_lr"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                self.fail(name, f"{getattr(self, name)!r}; use a learning rate > 0")

    def schedule_settings(self):
        """The settings the chosen schedule takes, by name."""
        return {n: getattr(self, n) for n in optim.SCHEDULES[self.schedule].run_settings}


@dataclass(frozen=True)
class CheckpointSettings(Section):
    checkpoint_dir: str = setting(None, "where checkpoints go (step-<N> folders and a 'latest' file)", kind="str",
                                  resumable=True)
    checkpoint_every: int = setting(0, "steps between checkpoints; 0 saves one at the end only", low=0,
                                    resumable=True)
    keep_checkpoints: int = setting(2, "complete checkpoints kept; older ones are removed", low=1, resumable=True)
    resume: str = setting(None, "continue from a checkpoint: 'latest' in --checkpoint-dir (the flag alone), or a "
                          "path", kind="str", resumable=True, bare="latest")
    delta_every: int = setting(0, "steps between online deltas of the tables (the rows changed and the keys dropped "
                               "since the last one), for a server to follow; 0: none", low=0, resumable=True)
    delta_dir: str = setting(None, "where deltas go (one file per delta, per rank under mpiexec)", kind="str",
                             resumable=True)

    def check(self):
        if self.resume == "latest" and not self.checkpoint_dir:
            self.fail("resume", "'latest' is looked up in --checkpoint-dir; give that folder, or the checkpoint's path")
        if self.checkpoint_every and not self.checkpoint_dir:
            self.fail("checkpoint_every", "needs --checkpoint-dir, the folder to write checkpoints to")
        if self.delta_every and not self.delta_dir:
            self.fail("delta_every", "needs --delta-dir, the folder to write deltas to")


@dataclass(frozen=True)
class OutputSettings(Section):
    metrics_out: str = setting(None, "write train and eval metrics to this file as JSON lines", kind="str",
                               resumable=True)
    plot: str = setting(None, "draw the loss and AUC curves, the device cache's hit rate and the time per phase to "
                        "this PNG (needs matplotlib: the 'plot' extra)",
                        kind="str", resumable=True)
    eval_every: int = setting(None, "steps between evaluations (default: four a run), and one at the end",
                              kind="int", low=1, resumable=True)
    log_every: int = setting(50, "steps between training metric lines", low=1, resumable=True)
    progress: bool = setting(True, "print plain lines instead of a progress bar", flag="--no-progress",
                             resumable=True)
    phase_times: bool = setting(False, "time each phase of the steps (lookup, interaction, MLPs, backward, row "
                                "update, communication, dense optimizer) into the train records' 'phases'; off, it "
                                "costs a step nothing", resumable=True)


@dataclass(frozen=True)
class RunSettings(Section):
    # the synthetic data, the tables' initializer and the shuffle take 64 bits
    seed: int = setting(0, "seeds the model, the data order and the synthetic data", low=0, high=2 ** 64 - 1)
    device: str = setting(None, "overrides GPUEMB_DEVICE (default: GPUEMB_DEVICE, else auto)",
                          choices=backend.DEVICES, resumable=True)
    pipeline: bool = setting(True, "prepare each batch after the last one computed, instead of "
                             "during it (the same results)", flag="--no-pipeline", resumable=True)
    deterministic: int = setting(0, "the same weights, rows and metrics, bit for bit, on any number of ranks that "
                                 "divides N: each global batch runs in N fixed micro-slices, whose gradients are "
                                 "added in slice order (the flag alone: 4; 0: off; docs/distributed.md)", low=0,
                                 bare=4, resumable=True)


@dataclass(frozen=True)
class DistributedSettings(Section):
    """Under mpiexec; a launch of one process ignores these, but for a --plan of one rank. A checkpoint reshards
    across world sizes and plans, and a codec only rounds what travels, so a resume may change any of them."""
    comm_backend: str = setting("auto", "how ranks talk: auto (one process: local; several: nccl with GPUs, else "
                                "mpi), or mpi, nccl, local", choices=BACKENDS, resumable=True)
    comm_codec: str = setting("fp32", "the wire format of the forward all-to-all of embedding rows (int8: a per-row "
                              "absmax scale, D + 4 bytes a row)", choices=CODECS, resumable=True)
    comm_codec_backward: str = setting(None, "the wire format of the backward all-to-all of their gradients "
                                       "(default: --comm-codec)", choices=CODECS, resumable=True)
    sharding: str = setting("auto", "how tables are placed on the ranks: auto (the planner), or every table table-, "
                            "row- or column-wise, table_row (its rows over one host's ranks) or grid (column ranges "
                            "over hosts, rows over a host's ranks; hosts: GPUEMB_LOCAL_RANKS or the launcher's)",
                            choices=RUN_SHARDINGS, resumable=True)
    plan: str = setting(None, "train on this plan, a JSON that tools/plan.py --json wrote, instead of the "
                        "planner's: one plan placing exactly the model's tables (first-order '<name>_linear' ones "
                        "too), for the ranks of the launch; overrides --sharding (docs/sharding.md)", kind="str",
                        resumable=True)
    plan_out: str = setting(None, "write the plan this run trains on (the planner's, or --plan's) to this file, "
                            "as tools/plan.py --json writes one: to estimate its step with tools/plan.py --plan, or "
                            "to train on again with --plan", kind="str", resumable=True)
    link: str = setting("none", "model the link between ranks: each collective also waits out the time this link "
                        "would take (latency + bytes/bandwidth of its algorithm), and train records gain 'link' "
                        "(compute, communication and exposed seconds a step): none, ib100 (InfiniBand HDR100), "
                        "ib400 (NDR), nvlink4 (H100 NVLink), or LAT_US:GBPS", kind="str", resumable=True)
    local_link: str = setting(None, "with --link, model the ranks of one host (GPUEMB_LOCAL_RANKS or the "
                              "launcher's) on this link, and --link between hosts: an all-to-all takes the slower "
                              "of the two (docs/comm.md); a preset or LAT_US:GBPS, as --link", kind="str",
                              resumable=True)
    overlap_comm: bool = setting(False, "run the collectives on a thread of their own, so that they travel while "
                                 "the step computes: the rows during the bottom MLP, the next batch's key exchange "
                                 "during the backward, the dense allreduce in buckets during the backward; the same "
                                 "bits as without (docs/distributed.md, Overlap)", resumable=True)
    dedup_keys: bool = setting(False, "send a key of a one-hot feature once a rank to its owner, however often the "
                               "rank's part holds it: its row comes back once and its gradients go back summed, "
                               "so skewed data sends fewer keys, rows and gradients; not with --deterministic "
                               "(docs/distributed.md, Deduplicated keys)", resumable=True)

    def check(self):
        for name in ("link", "local_link"):
            flag = "--" + name.replace("_", "-")
            try:
                parse_link(getattr(self, name), flag)
            except ValueError as e:
                self.fail(name, str(e).removeprefix(flag + " "))
