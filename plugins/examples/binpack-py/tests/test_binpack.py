"""The Rust policy's scenario table, run natively on the Python port."""

from pathlib import Path

import pytest
from binpack import Binpack, Compact, best_fit_all
from paceline_plugin import HostOffer, PlacementRequest, Resources
from paceline_plugin.harness import load_dir, run_placement

SCENARIOS = Path(__file__).resolve().parents[3] / "binpack" / "scenarios"


@pytest.mark.parametrize("scenario", load_dir(SCENARIOS), ids=lambda s: s.name)
def test_scenario(scenario):
    run_placement(Binpack, scenario)


def test_best_fit_all_picks_tightest_and_breaks_ties_low():
    total = Resources(4000, 4096)
    hosts = [HostOffer(Resources(c, m), total) for c, m in [(4000, 4096), (1000, 1024), (1000, 1024)]]
    hosts += [HostOffer(Resources(4000, 4096), total) for _ in range(3)]
    hosts.append(HostOffer(Resources(600, 600), total))
    slots = Compact(PlacementRequest(hosts=hosts)).slots
    assert best_fit_all(slots, 500, 512, 0) == 6
    assert best_fit_all(slots, 700, 512, 0) == 1
    assert best_fit_all(slots, 2000, 512, 0) == 0
    assert best_fit_all(slots, 5000, 0, 0) == -1
