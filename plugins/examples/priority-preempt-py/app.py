"""The component's entry module: componentize-py looks for `WitWorld` here."""

from paceline_plugin import export_preemption
from priority_preempt import PriorityPreempt

WitWorld = export_preemption(PriorityPreempt)
