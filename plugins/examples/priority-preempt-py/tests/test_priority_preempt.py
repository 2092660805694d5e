"""The Rust policy's scenario table, run natively on the Python port."""

from pathlib import Path

import pytest
from paceline_plugin.harness import load_dir, run_preemption
from priority_preempt import PriorityPreempt

SCENARIOS = Path(__file__).resolve().parents[3] / "priority-preempt" / "scenarios"


@pytest.mark.parametrize("scenario", load_dir(SCENARIOS), ids=lambda s: s.name)
def test_scenario(scenario):
    run_preemption(PriorityPreempt, scenario)


GPU_SCENARIOS = SCENARIOS.parent / "scenarios-gpu"


@pytest.mark.parametrize("scenario", load_dir(GPU_SCENARIOS), ids=lambda s: s.name)
def test_gpu_scenario_in_milli_gpus(scenario):
    # The GPU side (WIT 0.1.3): judged in milli-GPUs, as the Rust policy is.
    assert scenario.input.has_gpu_side()
    run_preemption(PriorityPreempt, scenario)
