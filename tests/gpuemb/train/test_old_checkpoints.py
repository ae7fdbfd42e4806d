"""Checkpoints written before the run config had sections (a flat config in the manifest) still resume."""
import json
import pathlib

import pytest

from gpuemb.autograd import backend
from gpuemb.train import train
from gpuemb.train.cli import parse_config
from gpuemb.train.errors import ResumeError

FIXTURE = pathlib.Path(__file__).parent / "data" / "checkpoint-before-sections"
README = json.loads((FIXTURE / "README.json").read_text())


@pytest.mark.skipif(backend.DEVICE != "cpu", reason="the fixture's figures are the CPU's, bit for bit")
@pytest.mark.parametrize("written_by", ["one", "two"])
def test_a_checkpoint_of_the_flat_config_resumes_to_the_run_it_came_from(written_by):
    folder = FIXTURE / written_by / "step-000000004"
    assert "embedding_dim" in json.loads((folder / "manifest.json").read_text())["body"]["config"]  # flat, old
    resume = README["flags"] + ["--resume", str(folder), "--no-progress"]
    with pytest.raises(ResumeError, match="--embedding-init-draw was 1, now 2. Resume with the settings it was saved"):
        train(parse_config(resume))  # its new keys drew one Philox call a column (store/init.py, draw 1)
    summary = train(parse_config(resume + ["--embedding-init-draw", "1"]))
    want = README["final_eval"]["one"]
    assert summary["steps"] == 8 and summary["steps_this_run"] == 4
    if written_by == "one":  # one process: the same sums, to the rounding of the machine's BLAS kernels
        # OpenBLAS picks its kernels by the processor, so on another machine than the one that wrote the fixture
        # a matmul may round its last bit otherwise (a fresh machine read log_loss ...6537 for ...6556).
        assert summary["eval"]["rows"] == want["rows"] and summary["eval"]["accuracy"] == want["accuracy"]
        assert summary["eval"]["log_loss"] == pytest.approx(want["log_loss"], rel=1e-7)
        assert summary["eval"]["auc"] == pytest.approx(want["auc"], abs=1e-6)
    else:  # 2 ranks' dense allreduce sums in another order
        assert summary["eval"]["log_loss"] == pytest.approx(want["log_loss"], rel=1e-5)
        assert summary["eval"]["auc"] == pytest.approx(want["auc"], abs=1e-4)
