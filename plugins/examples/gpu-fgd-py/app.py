"""The component's entry module: componentize-py looks for `WitWorld` here."""

from gpu_fgd import Fgd
from paceline_plugin import export_placement

WitWorld = export_placement(Fgd)
