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



def test_the_index_answers_as_the_scan_on_random_rounds():
    """Random hosts (some alike, so ties happen) and demands; each answer
    is assigned in the round, and now and then the last assignments are
    undone (a gang that failed): the index and the scan agree throughout."""
    import random

    from binpack import best_fit_indexed
    from paceline_plugin import Round, Task

    rng = random.Random(7)
    for case in range(40):
        hosts = []
        for _ in range(80):
            total = Resources(rng.choice([4000, 8000]), rng.choice([4096, 16384]), 1000)
            hosts.append(HostOffer(Resources(total.cpu_millis, total.memory_mib, total.disk_mib), total))
        demands = [Resources(rng.choice([100, 500, 1500]), rng.choice([64, 512, 2048]), 10) for _ in range(3)]
        request = PlacementRequest(hosts=hosts, tasks=[Task(demand=d) for d in demands])
        compact, round = Compact(request), Round(request)
        for step in range(300):
            t = rng.randrange(len(demands))
            d = demands[t]
            compact.sync(round)
            got = best_fit_indexed(compact, d.cpu_millis, d.memory_mib, d.disk_mib)
            want = best_fit_all(compact.slots, d.cpu_millis, d.memory_mib, d.disk_mib)
            assert got == want, f"case {case} step {step}"
            if got >= 0:
                round.assign(t, got)
            if rng.random() < 0.1:
                round.undo_since(max(0, round.checkpoint() - 3))
