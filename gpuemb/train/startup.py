"""The lines ``tools/train.py`` starts with: what device, data, model and training it chose, in words."""
from collections import defaultdict

from gpuemb.autograd import backend

from .recipes import RUN_PRESETS

LONG_LIST = 6  # a hyperparameter list longer than this (one value a feature) shows its range


def startup_lines(run):
    """The device, data, preset, model, ranks and training lines of ``run``."""
    c = run.config
    lines = [device_line(backend.device_info()), f"data: {run.data.description}"]
    if c.data.preset in RUN_PRESETS:  # what the preset is, and its cap; the lines below what runs
        about = RUN_PRESETS[c.data.preset].about
        lines.append(f"preset: {c.data.preset}, {about} (flags and --config override it)")
    n_dense = sum(p.size for p in run.model.parameters())
    shared_by = run.model.hyper.get("n_features") if c.model.tables == "shared" else None
    lines.append(f"model: {c.model.name}{hyper_text(run.model.hyper)}, {n_dense:,} dense parameters; "
                 f"{tables_text(run.tables, c.store.placement, shared_by)}")
    if run.cluster.world_size > 1:
        lines.append(f"ranks: {run.cluster.describe()}")
    o = c.optimization
    resumed = f", resumed at step {run.step}" if run.step else ""
    lines.append(f"training: {run.total_steps} steps of {run.batch_size} samples, {o.optimizer} lr {o.lr:g}, rows "
                 f"{o.embedding_optimizer} lr {o.embedding_lr:g}{resumed}")
    lines.append(run.memory()["line"])
    return lines


def device_line(info):
    """``device: cpu (numpy; no GPU: cupy is not installed)``: what was chosen, with what, and why."""
    arrays = info["array_module"].split(".")[0] if info["device"] != "cuda" else f"cupy on {info.get('gpu', 'a GPU')}"
    if info["requested"] == info["device"]:
        why = f"asked for by --device or GPUEMB_DEVICE={info['requested']}"
    else:  # auto: the backend's reason is "GPUEMB_DEVICE=auto and <what it found>"
        found = info["reason"].split(" and ", 1)[-1]
        why = f"no GPU: {found}" if info["device"] == "cpu" else f"picked automatically: {found}"
    return f"device: {info['device']} ({arrays}; {why})"


def hyper_text(hyper):
    """`` (bottom 64, top 256-128, 26 features, pooling sum)``: the settings that are on, in words."""
    words = []
    for key, value in hyper.items():
        name = key.replace("_", " ")
        if value is None or value is False or (isinstance(value, (int, float)) and value == 0):
            continue  # off or zero: the model does without it
        if value is True:
            words.append(name)
        elif key.startswith("n_") and isinstance(value, int):
            words.append(f"{value} {name[2:]}")
        elif isinstance(value, (list, tuple)) and len(value) > LONG_LIST:
            words.append(f"{name} {min(value)}..{max(value)} ({len(value)} values)")
        elif isinstance(value, (list, tuple)):
            words.append(f"{name} {'-'.join(map(str, value))}")
        else:
            words.append(f"{name} {value:g}" if isinstance(value, float) else f"{name} {value}")
    return f" ({', '.join(words)})" if words else ""


def tables_text(tables, placement, shared_by=None):
    """``26 tables of dim 128 (--store device)``, or each table's name and dim where there are few of a dim."""
    by_dim = defaultdict(list)
    for name, table in tables.items():
        by_dim[table.dim].append(name)
    n = f"{len(tables)} table{'s' * (len(tables) != 1)}"
    where = f"--store {placement}" + (f", shared by the {shared_by} features" if shared_by else "")
    if len(by_dim) == 1 and len(tables) > 3:
        return f"{n} of dim {next(iter(by_dim))} ({where})"
    groups = [f"{len(names)} of dim {dim}" if len(names) > 3 else ", ".join(f"{name} (dim {dim})" for name in names)
              for dim, names in sorted(by_dim.items(), key=lambda kv: len(kv[1]))]
    return f"{n} ({where}): {'; '.join(groups)}"
