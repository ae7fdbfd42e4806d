"""A picture of a run: the training loss and the eval AUC (with the teacher's, where known) against the step.

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
    fig, (loss_ax, auc_ax) = plt.subplots(1, 2, figsize=(10, 4))
    loss_ax.plot([r["step"] for r in train], [r["loss"] for r in train], label="train loss")
    loss_ax.plot([r["step"] for r in evals], [r["log_loss"] for r in evals], "o-", label="eval log-loss")
    loss_ax.set(xlabel="step", ylabel="log-loss", title="loss")
    auc_ax.plot([r["step"] for r in evals], [r["auc"] for r in evals], "o-", label="eval AUC")
    teacher = [r["teacher_auc"] for r in evals if "teacher_auc" in r]
    if teacher:
        auc_ax.axhline(teacher[-1], color="gray", linestyle="--", label="teacher AUC (the best reachable)")
    auc_ax.set(xlabel="step", ylabel="AUC", title="eval AUC")
    for ax in (loss_ax, auc_ax):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
