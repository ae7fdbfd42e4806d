"""Device profiles: the presets check themselves, the time is bytes over rates, a bad one is one line."""
import pytest

from gpuemb.sharding.profile import PROFILES, DeviceProfile, profile_named


def test_presets_and_seconds():
    assert set(PROFILES) == {"h200", "h200-copy", "cpu-2core"}
    assert all(p.validate() is p for p in PROFILES.values())
    assert DeviceProfile("p", 2e9, 1e9).seconds(4e9, 3e9) == 5.0


def test_bad_profile_is_one_line():
    with pytest.raises(ValueError, match=r"^device profile p: update_bps=0; use a finite number"):
        DeviceProfile("p", 1e9, 0)
    with pytest.raises(ValueError, match=r"^--profile 'a100' is not a device profile; use one of h200, "):
        profile_named("a100", "--profile")
