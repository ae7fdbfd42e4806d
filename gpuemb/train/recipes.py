"""Per-model training recipes: the settings a model trains with when the flags leave them unset.

Most models train well from the run's shared defaults. The models whose logit adds up the F·(F−1)/2 pairwise
products of the embeddings straight away, with no MLP in between to scale it (DeepFM's FM, xDeepFM's CIN), do
not: row-wise Adagrad moves every touched row by about its lr on its first updates, whatever the gradient's size,
so at lr 0.2 over rows of uniform(±1/4) those sums swing by several logits per step and the loss reached 2.9
by step 50. They start from small rows (normal, std 0.01, as the DeepFM paper's code does) and a lower row lr.

The figures behind each entry (``python tools/train.py --model M`` on the synthetic data, 800 steps of 4096,
against the teacher's 0.8370) are in docs/perf/README.md, "Model quality".

A run preset (``--preset NAME``, ``RUN_PRESETS``) goes further: a whole published configuration, its model, dims
and rules as well as its data (the synthetic preset of the same name), under whatever the flags and the config
file say.
"""
from dataclasses import dataclass

from gpuemb.io import synthetic
EMBEDDING_LR = 0.2  # the rows' lr of every model without a recipe
STEPS = 800  # steps on the synthetic data for a model without a recipe (about two minutes of DLRM on 2 cores)

_SMALL_ROWS = {"embedding_lr": 0.05, "embedding_init": "normal", "embedding_init_scale": 0.01}

RECIPES = {
    "deepfm": _SMALL_ROWS,
    "xdeepfm": _SMALL_ROWS,
    # PNN's 351 inner products reach the teacher's AUC less 0.021 at 800 steps, less 0.016 at 1000
    "pnn": {"synthetic_steps": 1000},
}


# Synthetic presets whose data needs its own settings, under the model's. Multi-hot bags are summed: a feature of
# 100 keys a row (MLPerf's hotness) moves its pooled embedding by a hundred row steps at once, and from rows of
# uniform(±1/4) at lr 0.2 DCN's loss reached 33 by step 5. Small rows and a lower lr, as for the FM models, reach
# 0.787 at step 120 against 0.693 (teacher 0.842). Then DCN gains slowly: 0.8036 at 800 steps, 0.8148 at 1600
# (teacher 0.8375), so multi-hot runs take 2400.
DATA_RECIPES = {"multihot": {**_SMALL_ROWS, "synthetic_steps": 2400}}


@dataclass(frozen=True)
class RunPreset:
    """A whole run: the synthetic data of its name (``gpuemb.io.synthetic.PRESETS``) and ``settings`` (keys to
    values) under the config file's and the flags'. ``about`` is the line a run prints."""
    about: str
    settings: dict


_MLPERF = synthetic.PRESETS["mlperf-dcnv2"]
RUN_PRESETS = {
    # MLPerf Training's DLRM-DCNv2 (mlcommons/training, recommendation_v2/torchrec_dlrm), whose rows (FBGEMM's
    # EXACT_ADAGRAD) and weights both train with Adagrad at 0.005; here on the synthetic stand-in for its multi-hot
    # Criteo 1TB, its tables capped to fit one host or one GPU. The dense lr is 0.001: at a CPU's batch MLPerf's
    # 0.005 sent the loss of the first 3 steps to 6.9 (0.59 at 0.001), and 60 steps of 512 reached AUC 0.701
    # against 0.727 (teacher 0.841). Rows from normal(0, 0.01), as for the multihot data: 100 summed ids move a
    # pooled embedding by 100 row steps. Batch and steps suit a CPU (about 12 minutes on 2 cores); on a GPU give
    # MLPerf's --batch-size 65536.
    "mlperf-dcnv2": RunPreset(
        "MLPerf DLRM-DCNv2: 13 dense features through a bottom MLP 512-256-128, 26 multi-hot features (MLPerf's "
        f"hotness, {sum(_MLPERF.hotness)} ids a row) pooled by sum from per-feature tables of dim 128 capped at "
        f"{synthetic.MLPERF_CAP:,} rows each ({sum(_MLPERF.cardinalities):,} in all, MLPerf's hold "
        f"{sum(synthetic.MLPERF_CARDINALITIES):,}), 3 low-rank cross layers of rank 512, top MLP "
        "1024-1024-512-256-1; Adagrad on the rows and the dense weights",
        {"model": "dcn", "model_args": {"bottom": [512, 256, 128], "n_cross": 3, "rank": 512,
                                        "deep": [1024, 1024, 512, 256]},
         "embedding_dim": 128, "tables": "per-feature", "optimizer": "adagrad", "lr": 0.001,
         "embedding_optimizer": "adagrad", "embedding_lr": 0.005, "embedding_init": "normal",
         "embedding_init_scale": 0.01, "batch_size": 1024, "steps": 400, "eval_rows": 20_000}),
}


def with_preset(given):
    """``given`` (keys to values: what the flags and a config file set) over the settings of the run preset its
    ``preset`` names, if any. A given ``--model`` other than the preset's drops the preset's hyperparameters (they
    are its model's); given ones add to them. ``--epochs`` drops its step count."""
    name = given.get("preset")
    preset = RUN_PRESETS.get(name) if isinstance(name, str) else None  # a list or table is refused once built
    if preset is None:
        return given
    fill = dict(preset.settings)
    if given.get("model", fill["model"]) != fill["model"]:
        del fill["model_args"]
    elif isinstance(given.get("model_args"), dict):  # anything else is refused, naming its flag, once built
        given = {**given, "model_args": {**fill["model_args"], **given["model_args"]}}
    if "epochs" in given:
        fill.pop("steps", None)
    return {**fill, **given}


def recipe(model, preset=None):
    """The recipe of ``model`` (on the synthetic ``preset``, where given): ``{setting: value}``, empty for a model
    that trains from the shared defaults."""
    return {**DATA_RECIPES.get(preset, {}), **RECIPES.get(model, {})}


def apply(config, synthetic):
    """``config`` with every recipe setting it leaves unset (None) filled in: the model's, else the shared one.

    synthetic: whether the run trains on the synthetic data, where the recipe's step count applies (on real data
    a run lasts an epoch unless told otherwise).
    """
    r = recipe(config.model.name, config.data.preset if synthetic else None)
    fill = {"embedding_lr": r.get("embedding_lr", EMBEDDING_LR),
            "embedding_init": r.get("embedding_init", "uniform"),
            "embedding_init_scale": r.get("embedding_init_scale")}
    if synthetic and config.optimization.steps is None and config.optimization.epochs is None:
        fill["steps"] = r.get("synthetic_steps", STEPS)
    now = config.flat()
    changes = {k: v for k, v in fill.items() if now[k] is None and v is not None}
    return config.replace(**changes) if changes else config
