"""A picture of a run: the training loss and the eval AUC (with the teacher's, where known) against the step, and,
where the train records have them, the device cache's hit rate and the time per phase of a step (stacked).

matplotlib is optional: ``require_matplotlib()`` is called when the run starts, so a missing one is an error
before any training, not after it.
"""
from .errors import ConfigError


def require_matplotlib():
    """The ``matplotlib.pyplot`` module on a file-only backend, or a ConfigError saying how to get it."""
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("--plot: needs matplotlib, which is not installed; `pip install matplotlib`, or drop "
                          "--plot (--metrics-out FILE keeps the numbers)") from None
    matplotlib.use("Agg")  # files only: no display is needed, or wanted, on a training machine
    import matplotlib.pyplot as plt
    return plt


def plot_metrics(records, path):
    """Draw ``records`` (metrics dicts, as :mod:`~gpuemb.train.metrics_log` writes them) to the PNG ``path``."""
    plt = require_matplotlib()
    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval"]
    cached = [r for r in train if r.get("hit_rate") is not None]
    timed = [r for r in train if r.get("phases")]
    drawers = [_loss, _auc] + ([_hit_rate] if cached else []) + ([_phases] if timed else [])
    fig, axes = plt.subplots(1, len(drawers), figsize=(5 * len(drawers), 4))
    for draw, ax in zip(drawers, axes):
        draw(ax, train, evals)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _loss(ax, train, evals):
    ax.plot([r["step"] for r in train], [r["loss"] for r in train], label="train loss")
    ax.plot([r["step"] for r in evals], [r["log_loss"] for r in evals], "o-", label="eval log-loss")
    ax.set(xlabel="step", ylabel="log-loss", title="loss")


def _auc(ax, train, evals):
    ax.plot([r["step"] for r in evals], [r["auc"] for r in evals], "o-", label="eval AUC")
    teacher = [r["teacher_auc"] for r in evals if "teacher_auc" in r]
    if teacher:
        ax.axhline(teacher[-1], color="gray", linestyle="--", label="teacher AUC (the best reachable)")
    ax.set(xlabel="step", ylabel="AUC", title="eval AUC")


def _hit_rate(ax, train, evals):
    cached = [r for r in train if r.get("hit_rate") is not None]
    ax.plot([r["step"] for r in cached], [r["hit_rate"] for r in cached], label="device cache")
    ax.set(xlabel="step", ylabel="hit rate since the last record", title="device cache hit rate", ylim=(0, 1.02))


def _phases(ax, train, evals):
    timed = [r for r in train if r.get("phases")]
    names = list(dict.fromkeys(p for r in timed for p in r["phases"]))  # in the order the records give them
    ms = [[r["phases"].get(p, 0.0) * 1e3 for r in timed] for p in names]
    ax.stackplot([r["step"] for r in timed], ms, labels=names)
    ax.set(xlabel="step", ylabel="ms per step", title="time per phase")
