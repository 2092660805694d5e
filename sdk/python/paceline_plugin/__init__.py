"""paceline-plugin: write Paceline scheduling policies in Python.

A policy is a pure function from a request to a decision, written against
one world of the WIT package ``paceline:scheduler@0.1.3`` and shipped as a
WebAssembly component built with componentize-py:

=====================  ========================  =====================  ==========================================
world                  interface                 export                 decides
=====================  ========================  =====================  ==========================================
``placement(-gpu)``    :class:`PlacementPolicy`  :func:`export_placement`  which host (and GPU devices) each task gets
``preemption(-gpu)``   :class:`PreemptionPolicy` :func:`export_preemption` which running tasks to stop
``lifecycle-batched``  :class:`LifecyclePolicy`  :func:`export_lifecycle`  how a job kind reacts to events
=====================  ========================  =====================  ==========================================

Layout:

- :mod:`~paceline_plugin.types`: the request and answer types of every world (mirrors ``wit/``).
- :mod:`~paceline_plugin.resources`: saturating resource arithmetic and integer scores.
- :mod:`~paceline_plugin.placement`: a placement round's working state and gang handling.
- :mod:`~paceline_plugin.validate`: the checks the host runs on every answer.
- :mod:`~paceline_plugin.harness`: scenario files and a native runner (for pytest).
- :mod:`~paceline_plugin.component`: the glue to componentize-py's generated bindings.

The SDK's version follows the WIT package it implements (0.1.3). It has the
same helpers, with the same tie-breaking, as the Rust SDK
(``sdk/plugin``), so a policy ported with them decides the same.
"""

from .component import export_lifecycle, export_placement, export_preemption
from .placement import Round, complete_grants, gangs, place_gangs, place_gangs_on_devices
from .policy import LifecyclePolicy, PlacementPolicy, PreemptionPolicy
from .resources import ScoreScale
from .types import *  # noqa: F401,F403
from . import types as _types

__version__ = "0.1.3"

#: The version of the WIT package this SDK implements.
WIT_PACKAGE = "paceline:scheduler@0.1.3"

__all__ = [
    "LifecyclePolicy",
    "PlacementPolicy",
    "PreemptionPolicy",
    "Round",
    "ScoreScale",
    "WIT_PACKAGE",
    "export_lifecycle",
    "export_placement",
    "export_preemption",
    "complete_grants",
    "gangs",
    "place_gangs",
    "place_gangs_on_devices",
] + [n for n, v in vars(_types).items() if not n.startswith("_")
    and (getattr(v, "__module__", None) == _types.__name__ or n in ("NO_VALUE", "U64_MAX", "DEVICE_MILLI", "HostFilter", "Event", "Action"))
]
