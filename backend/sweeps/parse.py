"""The sweeps' axes from their flags: "1,2,4" and "float32,q8_0" into lists, one clear line for anything else."""
from __future__ import annotations

from backend.errors import InputError


def parse_dtypes(text: str, flag: str = "--dtypes") -> list[str]:
    """"float32,q8_0" -> their canonical names, each once, in the order given."""
    from backend.precision import NAMES, canonical
    try:
        names = [canonical(part) for part in text.split(",") if part.strip()]
    except InputError:
        names = []
    if not names or "auto" in names:
        raise InputError(f"{flag} takes comma-separated precisions from {', '.join(NAMES)}; got {text!r}")
    return list(dict.fromkeys(names))


def parse_rates(text: str, flag: str = "--rates") -> list[float]:
    """"0.5,1,2" -> [0.5, 1.0, 2.0]; one clear message for anything else."""
    try:
        rates = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"{flag} takes comma-separated numbers, got {text!r}") from None
    if not rates or any(not 0 < r < float("inf") for r in rates):
        raise InputError(f"{flag} needs positive rates, got {text!r}")
    return sorted(set(rates))


def parse_sizes(text: str, flag: str) -> list[int]:
    """"1,2,4,8" -> [1, 2, 4, 8]; one clear message for anything else."""
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"{flag} takes comma-separated whole numbers, got {text!r}") from None
    if not sizes or any(s <= 0 for s in sizes):
        raise InputError(f"{flag} needs positive sizes, got {text!r}")
    return sorted(set(sizes))


def parse_depths(text: str, flag: str = "--depths") -> list[int]:
    """"0,4096,16384" -> [0, 4096, 16384]: context depths, 0 (an empty context) included."""
    try:
        depths = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"{flag} takes comma-separated whole numbers of tokens, got {text!r}") from None
    if not depths or any(d < 0 for d in depths):
        raise InputError(f"{flag} needs depths of 0 or more tokens, got {text!r}")
    return sorted(set(depths))
