"""The three policy interfaces, one per WIT world.

A policy is a pure function of its input. The component glue creates a new
policy object for every call, so nothing an instance keeps survives from one
call to the next; keep no state in module globals either (an instance of the
component serves many calls in a row).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import List, Sequence

from .types import Action, Event, JobView, PlacementRequest, PlacementResult, PreemptionRequest, TaskView, Victim


class PlacementPolicy(ABC):
    """A placement policy (world ``placement``): one call per placement round."""

    @abstractmethod
    def place(self, request: PlacementRequest) -> PlacementResult:
        """Decide where each task goes; every task must appear exactly once
        in the result, assigned or unplaced."""


class PreemptionPolicy(ABC):
    """A preemption policy (world ``preemption``)."""

    @abstractmethod
    def select_victims(self, request: PreemptionRequest) -> List[Victim]:
        """Choose the fewest victims that free each need."""


class LifecyclePolicy(ABC):
    """A job lifecycle (world ``lifecycle-batched``): how one kind of job
    reacts to events."""

    @abstractmethod
    def on_event(self, job: JobView, tasks: Sequence[TaskView], event: Event) -> List[Action]:
        """React to one event with actions for the runtime to take."""

    def on_events(self, job: JobView, tasks: Sequence[TaskView], events: Sequence[Event]) -> List[Action]:
        """React to several events of one job at once (``on-events``, WIT 0.1.1).

        The default asks :meth:`on_event` about each event in turn, against
        the same views, and concatenates the answers, keeping the first of
        identical actions (as the Rust SDK does). Override it when a job-wide
        decision is costly and bursts are large.
        """
        seen = set()
        out: List[Action] = []
        for e in events:
            for a in self.on_event(job, tasks, e):
                if a not in seen:
                    seen.add(a)
                    out.append(a)
        return out
