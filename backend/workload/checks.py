"""The checks a workload's fields pass: each value refused in one line naming where it came from."""
from __future__ import annotations

import math

from backend.errors import InputError


def whole(value: object, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        fail(where, "expected a whole number", value)
    if value < low:
        fail(where, f"must be at least {low}", value)
    if value > high:
        fail(where, f"must be at most {high}", value)
    return value


def positive(value: object, where: str, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(where, "expected a number", value)
    if (isinstance(value, float) and not math.isfinite(value)) or value <= 0:
        fail(where, "must be a number greater than 0", value)
    if value > high:
        fail(where, f"must be at most {high:g}", value)
    return float(value)


def non_negative(value: object, where: str, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(where, "expected a number", value)
    if (isinstance(value, float) and not math.isfinite(value)) or value < 0:
        fail(where, "must be a number, 0 or more", value)
    if value > high:
        fail(where, f"must be at most {high:g}", value)
    return float(value)


def choice(value: object, where: str, options: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in options:
        fail(where, f"expected one of {', '.join(options)}", value)
    return value


def fail(where: str, what: str, value: object):
    raise InputError(f"{where}: {what}, got {show(value)}")


def show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
