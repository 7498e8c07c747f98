"""The portable generator shared by the C++ injectors and this agent (docs/generator.md).

Every random choice a fault makes (which elements it hits, whether a `probability` draw fires)
comes from here, keyed by (scenario seed, fault index, step[, rank]), so the same scenario hits
the same elements in a built-in job and in an external job, on any compiler and any Python. The
C++ twin is ``harness/common/rng.h``; ``tests/data/generator_vectors.json`` is the shared test
vector that both test suites check. Pure Python integers (masked to 64 bits); no ``random``
module state.
"""

from __future__ import annotations

from typing import List, Optional

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
PICK_SALT = 0xE1E  # element choice: key(seed, 0xe1e + fault index, step)
FIRE_SALT = 0xFA17  # probability draw: key(seed, 0xfa17 + fault index, step, rank)


def _finalize(z: int) -> int:
    """SplitMix64's output function (Steele, Lea, Flood 2014; Vigna's splitmix64.c constants)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def mix(h: int, v: int) -> int:
    """Folds the 64-bit value ``v`` into the key ``h`` (hash_combine, then the SplitMix64
    finalizer)."""
    h &= MASK64
    v &= MASK64
    h ^= (v + GOLDEN + ((h << 6) & MASK64) + (h >> 2)) & MASK64
    h = (h + GOLDEN) & MASK64
    return _finalize(h)


class SplitMix64:
    """A SplitMix64 stream: ``state += golden; return finalize(state)``."""

    __slots__ = ("state",)

    def __init__(self, key: int) -> None:
        self.state = key & MASK64

    def next(self) -> int:
        """The next 64-bit output (an int in [0, 2**64))."""
        self.state = (self.state + GOLDEN) & MASK64
        return _finalize(self.state)

    def uniform01(self) -> float:
        """A double in [0, 1): the top 53 bits of one output times 2**-53."""
        return (self.next() >> 11) * (1.0 / 9007199254740992.0)

    def below(self, n: int) -> int:
        """An integer in [0, n), unbiased: outputs below (2**64 - n) % n are rejected."""
        if n <= 0:
            raise ValueError(f"below(n): n must be >= 1, got {n}")
        threshold = ((1 << 64) - n) % n
        while True:
            r = self.next()
            if r >= threshold:
                return r % n


def fires(seed: int, fault_index: int, step: int, rank: int, probability: float) -> bool:
    """The per-(step, rank) probability draw of a fault: ``uniform01 < probability``.

    ``probability >= 1`` always fires without drawing.
    """
    if probability >= 1.0:
        return True
    key = mix(mix(mix(seed, FIRE_SALT + fault_index), step), rank)
    return SplitMix64(key).uniform01() < probability


def element_count(numel: int, count: Optional[int], fraction: Optional[float]) -> int:
    """How many elements a fault hits: ``fraction`` x numel rounded half up (at least 1) when
    ``fraction`` is given, else ``count`` (default 1); never more than ``numel``."""
    if numel <= 0:
        return 0
    if fraction is not None:
        want = max(1, int(fraction * float(numel) + 0.5))
    else:
        want = 1 if count is None else int(count)
    return min(want, numel)


def pick_elements(seed: int, fault_index: int, step: int, numel: int, want: int) -> List[int]:
    """``want`` distinct flat indices in [0, numel), sorted ascending; identical on every rank.

    Floyd's sampling (Bentley & Floyd, CACM 1987): for j in [numel - want, numel) draw
    t = below(j + 1) and take t, or j when t was taken already. Exactly ``want`` draws.
    """
    if numel <= 0 or want <= 0:
        return []
    want = min(want, numel)
    if want == numel:
        return list(range(numel))
    rng = SplitMix64(mix(mix(seed, PICK_SALT + fault_index), step))
    chosen = set()
    for j in range(numel - want, numel):
        t = rng.below(j + 1)
        chosen.add(j if t in chosen else t)
    return sorted(chosen)
