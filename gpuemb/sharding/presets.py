"""Named table lists to plan: the 26 categorical features of Criteo's two click logs.

``criteo-1tb``: the Criteo Terabyte (24 days) table sizes of the MLPerf DLRM benchmark, as torchrec's DLRM example
and MLPerf's reference give them (``num_embeddings_per_feature``; 177,944,275 rows in all). ``criteo-kaggle``: the
Kaggle Display Advertising Challenge cardinalities that ``gpuemb.io.synthetic`` draws from.
"""
from gpuemb.io.synthetic import CRITEO_CARDINALITIES

from .spec import TableSpec

CRITEO_1TB_ROWS = (45833188, 36746, 17245, 7413, 20243, 3, 7114, 1441, 62, 29275261, 1572176, 345138, 10, 2209,
                   11267, 128, 4, 974, 14, 48937457, 11316796, 40094537, 452104, 12606, 104, 35)
PRESETS = {"criteo-1tb": CRITEO_1TB_ROWS, "criteo-kaggle": CRITEO_CARDINALITIES}


def preset_tables(name, dim=128, dtype="float32", rule="RowwiseAdagradRule"):
    """TableSpecs C1..C26 of preset ``name``, one key per sample each, sum-pooled."""
    if name not in PRESETS:
        raise ValueError(f"preset {name!r}: use one of {', '.join(PRESETS)}")
    return [TableSpec(f"C{i + 1}", rows, dim, dtype=dtype, rule=rule) for i, rows in enumerate(PRESETS[name])]
