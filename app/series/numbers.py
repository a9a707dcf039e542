"""Numbers as an answer writes them: a value that is exactly a float32 (data that went through float32 on its
way here: a pandas float32 column, a client that sends float32) is written as that float32's shortest repr
(8.999999), not with the float64 digits of its exact binary value (8.999999046325684)."""

from __future__ import annotations

from collections.abc import Sequence

# Whole numbers below this are exact in float32 and float64 alike and print the same in both.
_EXACT_INTEGERS = float(2**24)


def without_float32_noise(values: Sequence[float]) -> list[float]:
    """``values`` with each float32-exact one replaced by the float64 nearest its float32 shortest repr; the
    list given (or a list of it) when there is none, which is the usual case."""
    import numpy as np

    if not values:
        return list(values)
    array = np.fromiter(values, dtype=np.float64, count=len(values))
    with np.errstate(over="ignore", invalid="ignore"):
        narrow = array.astype(np.float32)
        suspect = narrow.astype(np.float64) == array
        suspect &= (np.abs(array) >= _EXACT_INTEGERS) | (array != np.trunc(array))
        suspect &= np.isfinite(array)
    out = values if isinstance(values, list) else list(values)
    if not suspect.any():
        return out
    out = list(out)
    for index in np.flatnonzero(suspect).tolist():
        out[index] = float(str(narrow[index]))
    return out


def float32_clean(value: float) -> float:
    """without_float32_noise of one number."""
    return without_float32_noise([value])[0]


def has_float32_noise(array: object) -> bool:
    """Whether a float64 array holds a value without_float32_noise would rewrite: answers that echo such input
    (an expected value that is the last one seen) are cleaned, others are left as they are without a pass."""
    import numpy as np

    values = np.asarray(array, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        suspect = values.astype(np.float32).astype(np.float64) == values
        suspect &= (np.abs(values) >= _EXACT_INTEGERS) | (values != np.trunc(values))
    return bool(suspect.any())


def interval_without_float32_noise(lower: Sequence[float], median: Sequence[float],
                                   upper: Sequence[float]) -> tuple[list[float], list[float], list[float]]:
    """The three arrays of a forecast through without_float32_noise, still ordered lower <= median <= upper: a
    bound rewritten could otherwise cross a median a hair away that was not."""
    low, mid, high = (without_float32_noise(values) for values in (lower, median, upper))
    return ([min(a, b) if before <= m else a for a, b, before, m in zip(low, mid, lower, median, strict=True)], mid,
            [max(a, b) if before >= m else a for a, b, before, m in zip(high, mid, upper, median, strict=True)])
