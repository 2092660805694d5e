"""The component's entry module: componentize-py looks for `WitWorld` here."""

from binpack import Binpack
from paceline_plugin import export_placement

WitWorld = export_placement(Binpack)
