"""Saturating resource arithmetic and integer scoring.

The same operations as the Rust SDK's ``Resources`` and ``ScoreScale``, with
the same results bit for bit: sums saturate at 2**64 - 1, differences at 0,
and scores wrap at 2**64 as Rust's ``wrapping_*`` do.
"""

from __future__ import annotations

from dataclasses import dataclass

from .types import U64_MAX, Resources

ZERO = Resources()


def fits_in(need: Resources, available: Resources) -> bool:
    """``need`` fits within ``available`` in every kind."""
    return (
        need.cpu_millis <= available.cpu_millis
        and need.memory_mib <= available.memory_mib
        and need.disk_mib <= available.disk_mib
        and need.gpus <= available.gpus
        and need.ports <= available.ports
    )


def is_zero(r: Resources) -> bool:
    """Every kind is zero."""
    return not (r.cpu_millis or r.memory_mib or r.disk_mib or r.gpus or r.ports)


def saturating_add(a: Resources, b: Resources) -> Resources:
    """Kind-wise sum, saturating at 2**64 - 1."""
    return Resources(
        min(a.cpu_millis + b.cpu_millis, U64_MAX),
        min(a.memory_mib + b.memory_mib, U64_MAX),
        min(a.disk_mib + b.disk_mib, U64_MAX),
        min(a.gpus + b.gpus, U64_MAX),
        min(a.ports + b.ports, U64_MAX),
    )


def saturating_sub(a: Resources, b: Resources) -> Resources:
    """Kind-wise difference, saturating at zero."""
    return Resources(
        max(a.cpu_millis - b.cpu_millis, 0),
        max(a.memory_mib - b.memory_mib, 0),
        max(a.disk_mib - b.disk_mib, 0),
        max(a.gpus - b.gpus, 0),
        max(a.ports - b.ports, 0),
    )


def minimum(a: Resources, b: Resources) -> Resources:
    """Kind-wise minimum."""
    return Resources(
        min(a.cpu_millis, b.cpu_millis),
        min(a.memory_mib, b.memory_mib),
        min(a.disk_mib, b.disk_mib),
        min(a.gpus, b.gpus),
        min(a.ports, b.ports),
    )


def times(r: Resources, n: int) -> Resources:
    """Kind-wise multiplication by a count, saturating."""
    return Resources(
        min(r.cpu_millis * n, U64_MAX),
        min(r.memory_mib * n, U64_MAX),
        min(r.disk_mib * n, U64_MAX),
        min(r.gpus * n, U64_MAX),
        min(r.ports * n, U64_MAX),
    )


def copies_in(need: Resources, available: Resources) -> int:
    """How many copies of ``need`` fit in ``available`` (2**64 - 1 if ``need`` is zero)."""

    def per(n: int, have: int) -> int:
        return U64_MAX if n == 0 else have // n

    return min(
        per(need.cpu_millis, available.cpu_millis),
        per(need.memory_mib, available.memory_mib),
        per(need.disk_mib, available.disk_mib),
        per(need.gpus, available.gpus),
        per(need.ports, available.ports),
    )


@dataclass(slots=True, frozen=True)
class ScoreScale:
    """Fixed-point weights that turn a resource vector into a fullness score
    without division: ``weight = 2**32 // total`` per kind (0 for a kind with
    zero capacity)."""

    cpu: int = 0
    memory: int = 0
    disk: int = 0
    gpus: int = 0

    @staticmethod
    def for_total(total: Resources) -> "ScoreScale":
        """Weights for a host of capacity ``total``."""

        def w(t: int) -> int:
            return 0 if t == 0 else (1 << 32) // t

        return ScoreScale(w(total.cpu_millis), w(total.memory_mib), w(total.disk_mib), w(total.gpus))

    def score(self, amount: Resources) -> int:
        """Sum over kinds of ``amount / total`` in 2**-32 units (0 is empty),
        wrapping at 2**64 like the Rust SDK."""
        return (
            amount.cpu_millis * self.cpu
            + amount.memory_mib * self.memory
            + amount.disk_mib * self.disk
            + amount.gpus * self.gpus
        ) & U64_MAX
