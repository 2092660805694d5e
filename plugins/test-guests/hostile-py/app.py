"""A hostile placement policy: what it does depends on the request's round.

- round 1: loops forever (the deadline must stop it);
- round 2: allocates without bound (the memory cap must stop it);
- round 3: raises (a trap, with the message on stderr);
- round 4: looks at the clock, the filesystem, the environment and
  randomness, and reports what it saw in the detail of every unplaced task;
- any other round: answers validly (every task deferred).
"""

import os
import random
import time

from paceline_plugin import PlacementPolicy, PlacementResult, Unplaced, UnplacedReason, export_placement


def _look() -> str:
    try:
        with open("/etc/passwd") as f:
            f.read(1)
        fs = "read"
    except OSError as e:
        fs = type(e).__name__
    try:
        listing = len(os.listdir("/"))
    except OSError as e:
        listing = type(e).__name__
    return (
        f"wall={time.time_ns()} mono={time.monotonic_ns()} fs={fs} ls={listing} "
        f"env={len(os.environ)} rand={random.Random().getrandbits(32)}"
    )


class Hostile(PlacementPolicy):
    def place(self, request):
        r = request.round
        if r == 1:
            while True:
                pass
        if r == 2:
            hoard = []
            while True:
                hoard.append(bytearray(1 << 20))
        if r == 3:
            raise RuntimeError(f"policy gave up on round {r}")
        detail = _look() if r == 4 else ""
        return PlacementResult([], [Unplaced(i, UnplacedReason.DEFERRED, detail) for i in range(len(request.tasks))])


WitWorld = export_placement(Hostile)
