"""LR schedules against values worked out by hand at the steps where their pieces meet."""
import dataclasses

import pytest

from gpuemb.optim import ConstantLR, CosineLR, StepLR, WarmupPolyDecayLR, schedule_from_state

POLY = WarmupPolyDecayLR(0.8, warmup_steps=10, decay_start=20, decay_steps=10)
COSINE = CosineLR(1.0, total_steps=110, warmup_steps=10, min_lr=0.1)


@pytest.mark.parametrize("schedule, step, lr", [
    (ConstantLR(0.3), 0, 0.3),
    (ConstantLR(0.3), 10 ** 6, 0.3),
    (POLY, 0, 0.0),                      # warmup starts at 0
    (POLY, 5, 0.4),                      # warmup midpoint
    (POLY, 10, 0.8),                     # warmup end
    (POLY, 15, 0.8),                     # hold
    (POLY, 20, 0.8),                     # decay start
    (POLY, 25, 0.8 * 0.5 ** 2),          # decay midpoint, power 2
    (POLY, 30, 0.0),                     # decay end
    (POLY, 1000, 0.0),                   # beyond the end
    (dataclasses.replace(POLY, end_lr=0.1), 25, 0.1 + 0.7 * 0.25),
    (dataclasses.replace(POLY, end_lr=0.1), 31, 0.1),
    (dataclasses.replace(POLY, power=1.0), 28, 0.8 * 0.2),
    (dataclasses.replace(POLY, warmup_start_factor=0.5), 0, 0.4),
    (dataclasses.replace(POLY, warmup_start_factor=0.5), 5, 0.6),
    (dataclasses.replace(POLY, decay_steps=0), 500, 0.8),  # no decay
    (COSINE, 0, 0.0),
    (COSINE, 5, 0.5),                    # warmup midpoint
    (COSINE, 10, 1.0),                   # cosine start
    (COSINE, 60, 0.55),                  # cosine midpoint: halfway between 1.0 and 0.1
    (COSINE, 85, 0.1 + 0.9 * 0.5 * (1 - 2 ** -0.5)),  # three quarters: cos(3π/4) = -√2/2
    (COSINE, 110, 0.1),                  # end
    (COSINE, 500, 0.1),                  # beyond the end
    (CosineLR(2.0, total_steps=4), 2, 1.0),
    (StepLR(1.0, step_size=3, gamma=0.5), 2, 1.0),
    (StepLR(1.0, step_size=3, gamma=0.5), 3, 0.5),
    (StepLR(1.0, step_size=3, gamma=0.5), 7, 0.25),
])
def test_schedule_values(schedule, step, lr):
    assert schedule(step) == pytest.approx(lr, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("schedule", [POLY, COSINE, StepLR(0.5, 4)], ids=lambda s: type(s).__name__)
def test_schedules_are_pure_functions_of_the_step(rng, schedule):
    steps = rng.integers(0, 150, 40).tolist()
    in_order = {s: schedule(s) for s in sorted(steps)}
    assert [schedule(s) for s in steps] == [in_order[s] for s in steps]


@pytest.mark.parametrize("schedule", [ConstantLR(0.1), POLY, COSINE, StepLR(0.5, 4, 0.3)],
                         ids=lambda s: type(s).__name__)
def test_state_dict_rebuilds_and_checks_the_schedule(schedule):
    state = schedule.state_dict()
    assert schedule_from_state(state) == schedule
    schedule.load_state_dict(state)
    field = dataclasses.fields(schedule)[0].name
    with pytest.raises(ValueError, match=f"{field}: saved 9.0"):
        schedule.load_state_dict({**state, field: 9.0})


def test_unknown_schedule_type_is_named():
    with pytest.raises(ValueError, match="unknown schedule type 'Linear'.*CosineLR"):
        schedule_from_state({"type": "Linear", "lr": 1.0})


@pytest.mark.parametrize("make, match", [
    (lambda: ConstantLR(-1.0), "lr=-1.0"),
    (lambda: WarmupPolyDecayLR(1.0, warmup_steps=10, decay_start=5, decay_steps=10), "decay_start=5 comes before"),
    (lambda: WarmupPolyDecayLR(1.0, warmup_steps=-1, decay_start=5, decay_steps=10), "warmup_steps=-1"),
    (lambda: WarmupPolyDecayLR(1.0, 0, 0, 10, power=0.0), "power=0.0; use a finite number > 0"),
    (lambda: WarmupPolyDecayLR(1.0, 0, 0, 10, warmup_start_factor=1.5), "warmup_start_factor=1.5"),
    (lambda: WarmupPolyDecayLR(1.0, 2.5, 5, 10), "warmup_steps=2.5; use an int"),
    (lambda: CosineLR(1.0, total_steps=10, warmup_steps=10), "total_steps=10; use an int >= 11"),
    (lambda: CosineLR(1.0, total_steps=10, min_lr=2.0), "min_lr=2.0"),
    (lambda: StepLR(1.0, step_size=0), "step_size=0"),
    (lambda: StepLR(1.0, step_size=2, gamma=0.0), "gamma=0.0"),
    (lambda: StepLR(float("inf"), step_size=2), "base_lr=inf"),
])
def test_bad_settings_raise(make, match):
    with pytest.raises(ValueError, match=match):
        make()
