"""The Rust policy's scenario files and unit cases, run natively on the
Python port (the cross-language test in host/plugin/tests/all/languages.rs
compares the built component with the Rust policy, grants included)."""

from pathlib import Path

import pytest
from gpu_fgd import STEP_MILLI, Fgd, Frag
from paceline_plugin import TaskClass
from paceline_plugin.harness import load_dir, run_placement

SCENARIOS = Path(__file__).resolve().parents[3] / "gpu-fgd" / "scenarios"


@pytest.mark.parametrize("scenario", load_dir(SCENARIOS), ids=lambda s: s.name)
def test_scenario(scenario):
    run_placement(Fgd, scenario)


def test_grants_name_the_devices_the_rust_policy_names():
    s = next(s for s in load_dir(SCENARIOS) if s.name.startswith("shares pack"))
    out = run_placement(Fgd, s)
    # Both halves on device 0, the whole GPU on device 1.
    assert [(g.task, g.devices) for g in out.grants] == [(0, [0]), (1, [0]), (2, [1])]


def test_fragmentation_is_what_the_workload_cannot_use():
    frag = Frag(
        [
            TaskClass(1000, 0, 500, 1),
            TaskClass(1000, 0, 1000, 1),
            TaskClass(1000, 0, 0, 5),
        ]
    )
    assert frag.of(8000, 8000, [1000, 300]) == 300 + 300
    assert frag.of(0, 8000, [1000, 300]) == 1300 * 2 + 1300 * 5
    assert frag.of(8000, 8000, [500, 500]) == 1000
    assert frag.of(8000, 8000, []) == 0


def test_steps_floor_as_rusts_div_euclid():
    frag = Frag([TaskClass(1000, 0, 1000, 99), TaskClass(1000, 0, 500, 1)])
    g0 = frag.of(8000, 8000, [300]) - frag.of(8000, 8000, [600])
    g1 = frag.of(8000, 8000, [200, 1000]) - frag.of(8000, 8000, [500, 1000])
    assert (g0, g1) == (-29_400, -29_500)
    assert frag.step(g0) == frag.step(g1)
    assert frag.step(g1 - 100 * STEP_MILLI) < frag.step(g1)
    assert frag.step(0) == 0
    # Floor, not truncation toward zero: any decrease is below no change.
    assert frag.step(-1) == -1
    # A workload of no weight divides by one, as the Rust policy's max(1).
    assert Frag([]).step(-80) == -2
