"""The startup lines of tools/train.py say in words what was chosen: no dict repr, no exception text."""
from types import SimpleNamespace

from gpuemb.train.startup import device_line, hyper_text, tables_text


def test_the_cpu_line_says_why_there_is_no_gpu():
    info = {"device": "cpu", "requested": "auto", "array_module": "numpy",
            "reason": "GPUEMB_DEVICE=auto and cupy is not installed"}
    assert device_line(info) == "device: cpu (numpy; no GPU: cupy is not installed)"
    asked = device_line({**info, "requested": "cpu", "reason": "GPUEMB_DEVICE=cpu"})
    assert asked == "device: cpu (numpy; asked for by --device or GPUEMB_DEVICE=cpu)"


def test_hyperparameters_read_as_words():
    dlrm = {"bottom": (512, 256, 64), "top": (512, 256), "dropout": 0.0, "self_interaction": False,
            "n_features": 26, "pooling": "sum"}
    assert hyper_text(dlrm) == " (bottom 512-256-64, top 512-256, 26 features, pooling sum)"
    hot = hyper_text({"hotness": (3, 2, 1, 2, 6, 1, 100, 27), "rank": 512, "dropout": 0.25})
    assert hot == " (hotness 1..100 (8 values), rank 512, dropout 0.25)"


def test_many_tables_are_summed_up_and_few_named():
    def tables(dims):
        return {f"C{i + 1}": SimpleNamespace(dim=d) for i, d in enumerate(dims)}
    assert tables_text(tables([128] * 26), "device") == "26 tables of dim 128 (--store device)"
    assert (tables_text(tables([4, 16, 32] + [16] * 23), "host") ==
            "26 tables (--store host): C1 (dim 4); C3 (dim 32); 24 of dim 16")
    shared = tables_text({"embeddings": SimpleNamespace(dim=16)}, "device", shared_by=26)
    assert shared == "1 table (--store device, shared by the 26 features): embeddings (dim 16)"
