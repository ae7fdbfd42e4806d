"""The training loop (training_loop.py) owns the loop's state: it steps a run to its end, writes what follows each
step in the schedule's order, prepares ahead only where the schedule allows, and keeps its window for a resume."""
from gpuemb.train import Reporter, Run, TrainConfig


def config(tmp_path, **changes):
    return TrainConfig.from_dict({**dict(model_args={"top": [16], "bottom": [8]}, embedding_dim=4, batch_size=64,
                                         eval_rows=500, progress=False, steps=6, seed=2, log_every=4, eval_every=3,
                                         checkpoint_dir=str(tmp_path / "ckpt")), **changes})


def test_the_loop_writes_what_follows_each_step_in_order_and_looks_ahead_only_where_allowed(tmp_path):
    run, records, asked = Run(config(tmp_path)), [], []
    try:
        step = run.pipeline.step

        def told(ahead=True):
            asked.append(ahead)
            return step(ahead)
        run.pipeline.step = told
        run.loop.run(run, records.append, Reporter())
        assert [(r["kind"], r["step"]) for r in records] == [
            ("eval", 3), ("train", 4), ("eval", 6), ("checkpoint", 6), ("train", 6)]  # the last: the window's rest
        assert asked == [True, True, False, True, True, False]  # not into an evaluation, nor past the end
        assert not run.loop.window and run.step == 6
    finally:
        run.close()


def test_the_loop_keeps_its_window_of_losses_for_a_resume(tmp_path):
    run = Run(config(tmp_path, steps=3, log_every=10, eval_every=10))
    try:
        with run.pipeline as pipeline:
            losses = [pipeline.step() for _ in range(2)]
            for loss in losses:
                run.loop.window.add(loss)
        assert run.state_dict()["loop"] == {"window": losses}
        run.loop.load_state_dict({"window": losses[:1]})
        assert run.loop.window.losses == losses[:1]
    finally:
        run.close()
