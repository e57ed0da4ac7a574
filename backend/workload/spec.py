"""Workloads: how many requests, when they arrive, how long their prompts and outputs are.

A workload is a TOML file (presets under profiles/workloads/) or flags on top of one; both go
through the same validation, whose messages name the file (or flag) and the field. A
WorkloadSource turns a spec into requests, reproducibly from its seed: arrival times come from
one random stream, and each request's lengths and prompt from a stream of its own (seeded by
the workload seed and the request index), so request i is the same whatever the timing.
"""
from __future__ import annotations

import math
import os
import random
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import profiles as _shipped
from backend.errors import InputError
from backend.workload.checks import choice, fail, non_negative, positive, show, whole

WORKLOAD_DIR: Path = _shipped.WORKLOADS   # profiles/workloads, found through the `profiles` package
ARRIVALS = ("burst", "constant", "poisson", "gamma", "closed")
RATE_ARRIVALS = ("constant", "poisson", "gamma")
PROMPT_SOURCES = ("synthetic", "text")
LENGTH_KINDS = {"fixed": ("value",), "uniform": ("low", "high"), "normal": ("mean", "std", "low", "high")}
TRACE_ARRIVAL = "trace"   # the arrival of a spec with a trace file: its rows' times
KEYS = ("description", "num_requests", "duration_s", "arrival", "rate", "burstiness", "concurrency",
        "ramp_ms", "think_ms", "trace", "trace_speed", "prompt_len", "output_len", "prompt_source", "seed",
        "turns", "turn_len", "shared_prefix_len")
# Keys whose default is left out of to_dict, so run.json files and workload tables written before
# conversations and shared prefixes existed read the same.
DEFAULTS_UNSAID = {"turns": 1, "turn_len": None, "shared_prefix_len": 0}
FLAGS = {"num_requests": "--requests", "duration_s": "--duration", "arrival": "--arrival", "rate": "--rate",
         "burstiness": "--burstiness", "concurrency": "--concurrency", "ramp_ms": "--ramp-ms",
         "think_ms": "--think-ms", "trace": "--trace", "trace_speed": "--trace-speed", "prompt_len": "--prompt-len",
         "output_len": "--output-len", "prompt_source": "--prompt-source", "seed": "--seed", "turns": "--turns",
         "turn_len": "--turn-len", "shared_prefix_len": "--shared-prefix-len"}
# Limits that keep a typo from asking for a run that cannot end or fit in memory.
MAX_REQUESTS = 1_000_000
MAX_TOKENS = 1 << 20
MAX_CONCURRENCY = 100_000
MAX_RATE = 1e6
MAX_DURATION_S = 7 * 86400.0
MAX_WAIT_MS = 3600_000.0    # ramp and think times
MAX_TRACE_SPEED = 1e6
MAX_TURNS = 10_000

Label = Callable[[str], str]   # field key ("rate", "prompt_len.low") -> where to say it is wrong


@dataclass(slots=True)
class LengthDist:
    """Token counts: fixed, uniform in [low, high], or normal(mean, std) clipped to [low, high]."""

    kind: str = "fixed"
    value: int = 0
    low: int = 0
    high: int = 0
    mean: float = 0.0
    std: float = 0.0

    @classmethod
    def parse(cls, value: object, where: str = "length") -> LengthDist:
        """From a flag or a TOML value: N, "N", "A:B" or a table such as {kind = "normal", ...}."""
        return _length(value, "length", lambda key: where)

    def sample(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return self.value
        if self.kind == "uniform":
            return rng.randint(self.low, self.high)
        return min(self.high, max(self.low, round(rng.gauss(self.mean, self.std))))

    def mean_value(self) -> float:
        """The mean length (of the clipped normal: its mean, clipped to the bounds)."""
        if self.kind == "fixed":
            return float(self.value)
        if self.kind == "uniform":
            return (self.low + self.high) / 2.0
        return min(float(self.high), max(float(self.low), self.mean))

    def describe(self) -> str:
        if self.kind == "fixed":
            return str(self.value)
        if self.kind == "uniform":
            return f"{self.low}:{self.high}"
        return f"normal(mean {self.mean:g}, std {self.std:g}, {self.low}..{self.high})"

    def to_dict(self) -> dict:
        return {"kind": self.kind, **{key: getattr(self, key) for key in LENGTH_KINDS[self.kind]}}


@dataclass(slots=True)
class WorkloadSpec:
    name: str
    num_requests: int | None = 32        # either a count of requests ...
    duration_s: float | None = None      # ... or a duration over which they arrive
    arrival: str = "poisson"             # burst | constant | poisson | gamma | closed
    rate: float | None = 4.0             # requests per second (constant, poisson, gamma)
    burstiness: float = 1.0              # gamma shape: 1 is Poisson, below 1 burstier, above steadier
    concurrency: int | None = None       # closed loop: users each waiting for their answer
    ramp_ms: float | None = None         # closed loop: users start spread over this (None: a guess, see arrivals)
    think_ms: float = 0.0                # closed loop: a user's pause between an answer and its next request
    trace: str | None = None             # a trace file replayed (arrival "trace"; lengths from the file)
    trace_speed: float = 1.0             # trace times are divided by this (2: twice as fast)
    prompt_len: LengthDist = field(default_factory=lambda: LengthDist("fixed", 128))
    output_len: LengthDist = field(default_factory=lambda: LengthDist("fixed", 64))
    prompt_source: str = "synthetic"     # synthetic token ids, or the shipped text prompts
    seed: int = 0
    description: str = ""
    # Conversations (backend/workload/conversations.py): each arrival (or closed-loop user) runs `turns`
    # requests, turn k+1 arriving think_ms after turn k's answer, its prompt the conversation so far plus a
    # new message of turn_len tokens (None: drawn as prompt_len); num_requests then counts conversations.
    turns: int = 1
    turn_len: LengthDist | None = None
    shared_prefix_len: int = 0           # the first L tokens of every first turn are the same (a system prompt)

    def to_dict(self) -> dict:
        """The TOML-shaped fields (name aside): what a workload file would hold."""
        out = {key: getattr(self, key) for key in KEYS if getattr(self, key) is not None
               and not (key in DEFAULTS_UNSAID and getattr(self, key) == DEFAULTS_UNSAID[key])}
        out["prompt_len"] = self.prompt_len.to_dict()
        out["output_len"] = self.output_len.to_dict()
        if self.turn_len is not None:
            out["turn_len"] = self.turn_len.to_dict()
        return out

    @property
    def is_conversation(self) -> bool:
        """Requests depend on earlier answers (turns > 1): the source needs each finished request's output."""
        return self.turns > 1

    @property
    def num_total_requests(self) -> int | None:
        """Requests the workload sends when its count is known: conversations x turns."""
        return None if self.num_requests is None else self.num_requests * self.turns


def list_workloads() -> list[str]:
    return sorted(p.stem for p in WORKLOAD_DIR.glob("*.toml"))


def load_workload(name_or_path: str) -> WorkloadSpec:
    """A preset name (profiles/workloads/NAME.toml) or the path of a workload TOML file; its trace
    path, if any, is taken relative to the file's folder."""
    path = WORKLOAD_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        path = Path(name_or_path)
        if not path.exists():
            if path.suffix == ".toml" or len(path.parts) > 1:
                raise InputError(f"workload file not found: {path}")
            raise InputError(f"unknown workload '{name_or_path}' (known: {', '.join(list_workloads())}; "
                             "or give the path of a .toml file)")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML ({exc})") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not valid TOML (not UTF-8 text)") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return _spec_from_dict(data, path.stem, lambda key: f"{path}: field '{key}'", path.parent)


def workload_from_dict(data: dict, name: str = "custom", source: str = "workload") -> WorkloadSpec:
    """Validate TOML-shaped fields (as the window edits them); errors say `source: field 'key'`.
    A relative trace path is taken from the working folder."""
    if not isinstance(data, dict):
        raise InputError(f"{source}: expected a table of fields, got {show(data)}")
    return _spec_from_dict(data, name, lambda key: f"{source}: field '{key}'")


def validate_workload(spec: WorkloadSpec) -> WorkloadSpec:
    return workload_from_dict(spec.to_dict(), spec.name, f"workload '{spec.name}'")


def apply_overrides(spec: WorkloadSpec, *, num_requests: int | None = None, duration_s: float | None = None,
                    arrival: str | None = None, rate: float | None = None, burstiness: float | None = None,
                    concurrency: int | None = None, prompt_len: object = None, output_len: object = None,
                    prompt_source: str | None = None, seed: int | None = None, ramp_ms: float | None = None,
                    think_ms: float | None = None, trace: str | None = None,
                    trace_speed: float | None = None, turns: int | None = None, turn_len: object = None,
                    shared_prefix_len: int | None = None) -> WorkloadSpec:
    """The spec with the given flags (None: not given) in place; errors name the flag.

    A count of requests replaces a duration and vice versa. Lengths take N, "N" or "A:B". A trace
    (a path from the working folder) replaces the spec's arrivals, count and lengths: all its rows
    unless --requests or --duration is given too.
    """
    given = {key: value for key, value in (
        ("num_requests", num_requests), ("duration_s", duration_s), ("arrival", arrival), ("rate", rate),
        ("burstiness", burstiness), ("concurrency", concurrency), ("prompt_len", prompt_len),
        ("output_len", output_len), ("prompt_source", prompt_source), ("seed", seed), ("ramp_ms", ramp_ms),
        ("think_ms", think_ms), ("trace", trace), ("trace_speed", trace_speed), ("turns", turns),
        ("turn_len", turn_len), ("shared_prefix_len", shared_prefix_len)) if value is not None}
    if "trace" in given or spec.trace is not None:
        for key in ("prompt_len", "output_len"):
            if key in given:
                raise InputError(f"{FLAGS[key]}: a trace's lengths are its own; leave {FLAGS[key]} out with --trace")
    for key in ("prompt_len", "output_len", "turn_len"):
        if isinstance(given.get(key), LengthDist):
            given[key] = given[key].to_dict()
    data = spec.to_dict()
    if "num_requests" in given and "duration_s" not in given:
        data.pop("duration_s", None)
    if "duration_s" in given and "num_requests" not in given:
        data.pop("num_requests", None)
    if "trace" in given:   # a new trace: all its rows, unless a count or a duration is given with it
        for key in ("num_requests", "duration_s"):
            if key not in given:
                data.pop(key, None)
        if "arrival" not in given:
            data["arrival"] = TRACE_ARRIVAL
        data["description"] = f"replays the trace {Path(given['trace']).name}"
    data.update(given)

    def label(key: str) -> str:
        top = key.split(".")[0]
        return FLAGS[top] if top in given else f"workload '{spec.name}': field '{key}'"

    return _spec_from_dict(data, Path(given["trace"]).stem if "trace" in given else spec.name, label)


def _spec_from_dict(data: dict, name: str, label: Label, base: Path | None = None) -> WorkloadSpec:
    unknown = sorted(str(key) for key in data if key not in KEYS)
    if unknown:
        raise InputError(f"{label(unknown[0])}: unknown key (known: {', '.join(KEYS)})")

    def get(key: str, check: Callable[[object, str], object]):
        return None if key not in data else check(data[key], label(key))

    if "trace" in data:
        return _trace_spec_from_dict(data, name, label, base)
    if get("trace_speed", lambda v, w: positive(v, w, MAX_TRACE_SPEED)) not in (None, 1.0):
        raise InputError(f"{label('trace_speed')}: scales a trace's times; give a trace file too")
    ramp_ms = get("ramp_ms", lambda v, w: non_negative(v, w, MAX_WAIT_MS))
    think_ms = get("think_ms", lambda v, w: non_negative(v, w, MAX_WAIT_MS))

    num_requests = get("num_requests", lambda v, w: whole(v, w, 1, MAX_REQUESTS))
    duration_s = get("duration_s", lambda v, w: positive(v, w, MAX_DURATION_S))
    if num_requests is None and duration_s is None:
        raise InputError(f"{label('num_requests')}: missing (give num_requests or duration_s)")
    if num_requests is not None and duration_s is not None:
        raise InputError(f"{label('duration_s')}: give either num_requests or duration_s, not both")
    if "arrival" not in data:
        raise InputError(f"{label('arrival')}: missing (one of {', '.join(ARRIVALS)})")
    arrival = choice(data["arrival"], label("arrival"), ARRIVALS)
    rate = get("rate", lambda v, w: positive(v, w, MAX_RATE))
    burstiness = get("burstiness", lambda v, w: positive(v, w, 1e3))
    concurrency = get("concurrency", lambda v, w: whole(v, w, 1, MAX_CONCURRENCY))
    if arrival in RATE_ARRIVALS and rate is None:
        raise InputError(f"{label('rate')}: missing; arrival '{arrival}' needs a rate (requests per second)")
    if arrival == "closed" and concurrency is None:
        raise InputError(f"{label('concurrency')}: missing; arrival 'closed' needs a number of concurrent users")
    turns = get("turns", lambda v, w: whole(v, w, 1, MAX_TURNS)) or 1
    shared_prefix_len = get("shared_prefix_len", lambda v, w: whole(v, w, 0, MAX_TOKENS)) or 0
    turn_len = None if "turn_len" not in data else _length(data["turn_len"], "turn_len", label)
    if turn_len is not None and turns == 1:
        raise InputError(f"{label('turn_len')}: is the length of a conversation's later messages; give turns > 1 too")
    for key, value in (("ramp_ms", ramp_ms), ("think_ms", think_ms)):
        if arrival != "closed" and value and not (key == "think_ms" and turns > 1):
            raise InputError(f"{label(key)}: is for a closed loop's users (arrival 'closed') or a conversation's "
                             f"turns (turns > 1), not arrival '{arrival}'")
    if arrival == "burst" and num_requests is None:
        raise InputError(f"{label('duration_s')}: arrival 'burst' sends a number of requests at once; "
                         "give num_requests instead")
    if num_requests is not None and num_requests * turns > MAX_REQUESTS:
        raise InputError(f"{label('num_requests')}: {num_requests} conversations of {turns} turns are more than "
                         f"the limit of {MAX_REQUESTS} requests")
    if duration_s is not None and arrival in RATE_ARRIVALS and rate * duration_s > MAX_REQUESTS:
        raise InputError(f"{label('duration_s')}: rate {rate:g}/s over {duration_s:g} s is "
                         f"{rate * duration_s:.0f} requests, more than the limit of {MAX_REQUESTS}")
    for key in ("prompt_len", "output_len"):
        if key not in data:
            raise InputError(f"{label(key)}: missing (a token count N, \"A:B\" or a table)")
    description = get("description", lambda v, w: v if isinstance(v, str) else fail(w, "expected text", v))
    return WorkloadSpec(
        name=name, num_requests=num_requests, duration_s=duration_s, arrival=arrival, rate=rate,
        burstiness=1.0 if burstiness is None else burstiness, concurrency=concurrency,
        ramp_ms=ramp_ms if arrival == "closed" else None, think_ms=think_ms or 0.0,
        prompt_len=_length(data["prompt_len"], "prompt_len", label),
        output_len=_length(data["output_len"], "output_len", label),
        prompt_source=get("prompt_source", lambda v, w: choice(v, w, PROMPT_SOURCES)) or "synthetic",
        seed=get("seed", lambda v, w: whole(v, w, 0, 2**63 - 1)) or 0,
        description=description or "", turns=turns, turn_len=turn_len, shared_prefix_len=shared_prefix_len,
    )


def _length(value: object, key: str, label: Label) -> LengthDist:
    if isinstance(value, str):
        parts = value.strip().split(":")
        try:
            numbers = [int(part) for part in parts]
        except ValueError:
            numbers = []
        if len(numbers) not in (1, 2):
            fail(label(key), "expected a token count N or a range A:B", value)
        value = numbers[0] if len(numbers) == 1 else {"kind": "uniform", "low": numbers[0], "high": numbers[1]}
    if not isinstance(value, dict):
        if isinstance(value, bool) or not isinstance(value, int):
            fail(label(key), "expected a token count N, a range \"A:B\" or a table", value)
        value = {"kind": "fixed", "value": value}
    if "kind" not in value:
        raise InputError(f"{label(key + '.kind')}: missing (one of {', '.join(LENGTH_KINDS)})")
    kind = choice(value["kind"], label(key + ".kind"), tuple(LENGTH_KINDS))
    wanted = LENGTH_KINDS[kind]
    for sub in value:
        if sub != "kind" and sub not in wanted:
            raise InputError(f"{label(f'{key}.{sub}')}: unknown key for kind '{kind}' (it takes {', '.join(wanted)})")
    for sub in wanted:
        if sub not in value:
            raise InputError(f"{label(f'{key}.{sub}')}: missing (kind '{kind}' takes {', '.join(wanted)})")
    dist = LengthDist(kind)
    for sub in wanted:
        where = label(f"{key}.{sub}")
        number = positive(value[sub], where, MAX_TOKENS) if sub in ("mean", "std") else \
            whole(value[sub], where, 1, MAX_TOKENS)
        setattr(dist, sub, number)
    if kind != "fixed" and dist.low > dist.high:
        raise InputError(f"{label(key)}: min {dist.low} > max {dist.high}")
    return dist


def _trace_spec_from_dict(data: dict, name: str, label: Label, base: Path | None) -> WorkloadSpec:
    """A workload that replays a trace file: the validation of its TOML-shaped fields.

    With `trace = FILE` the file gives the arrivals (arrival "trace"), the count (all rows, or the first
    num_requests, or those arriving within duration_s after scaling) and the lengths. The spec's
    prompt_len and output_len become the range the replayed rows span and its rate their mean rate:
    informative (the run's settings show them, and the cache slots are sized from them), the rows
    themselves are what is sent. Keys of drawn workloads (rate, burstiness, concurrency, the lengths)
    are ignored, so a preset with a trace on top stays valid; prompt_source and seed still choose how
    the prompts are built.
    """
    from backend.workload.trace import replay_rows
    def get(key: str, check):
        return None if key not in data else check(data[key], label(key))

    raw = data["trace"]
    if not isinstance(raw, str) or not raw.strip():
        fail(label("trace"), "expected the path of a trace file", raw)
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = (base or Path.cwd()) / path
    path = Path(os.path.normpath(path))
    speed = get("trace_speed", lambda v, w: positive(v, w, MAX_TRACE_SPEED)) or 1.0
    arrival = data.get("arrival", TRACE_ARRIVAL)
    if arrival != TRACE_ARRIVAL:
        raise InputError(f"{label('arrival')}: a trace replays its own arrival times; with a trace file the "
                         f"arrival is '{TRACE_ARRIVAL}', got {arrival!r}")
    if get("turns", lambda v, w: whole(v, w, 1, MAX_TURNS)) not in (None, 1) or "turn_len" in data:
        raise InputError(f"{label('turns' if 'turns' in data else 'turn_len')}: a trace replays its own requests; "
                         "conversations are for drawn workloads")
    if get("shared_prefix_len", lambda v, w: whole(v, w, 0, MAX_TOKENS)):
        raise InputError(f"{label('shared_prefix_len')}: a trace's shared prefixes are its hash_ids (Mooncake); "
                         "leave it out with a trace")
    for key in ("ramp_ms", "think_ms"):
        if get(key, lambda v, w: non_negative(v, w, 1e12)):
            raise InputError(f"{label(key)}: is for a closed loop's users, not a trace's arrivals")
    num_requests = get("num_requests", lambda v, w: whole(v, w, 1, MAX_REQUESTS))
    duration_s = get("duration_s", lambda v, w: positive(v, w, MAX_DURATION_S))
    if num_requests is not None and duration_s is not None:
        raise InputError(f"{label('duration_s')}: give either num_requests or duration_s, not both")
    prompt_source = get("prompt_source", lambda v, w: choice(v, w, PROMPT_SOURCES)) or "synthetic"
    seed = get("seed", lambda v, w: whole(v, w, 0, 2**63 - 1)) or 0
    description = get("description", lambda v, w: v if isinstance(v, str) else fail(w, "expected text", v))
    try:
        rows = replay_rows(path, speed, num_requests, duration_s)
    except InputError as exc:
        raise InputError(f"{label('trace')}: {exc}") from None
    if num_requests is None and duration_s is None:
        if len(rows) > MAX_REQUESTS:
            raise InputError(f"{label('trace')}: {path} has {len(rows)} rows, more than the limit of "
                             f"{MAX_REQUESTS}; replay the first ones with num_requests (--requests N)")
        num_requests = len(rows)
    span_s = rows[-1].arrival_ms / 1000.0
    return WorkloadSpec(
        name=name, num_requests=num_requests, duration_s=duration_s, arrival=TRACE_ARRIVAL,
        rate=(len(rows) - 1) / span_s if span_s > 0 else None,
        prompt_len=_span([r.prompt_len for r in rows]), output_len=_span([r.output_len for r in rows]),
        prompt_source=prompt_source, seed=seed, description=description or "",
        trace=str(path), trace_speed=speed)


def _span(lengths: list[int]) -> LengthDist:
    low, high = min(lengths), max(lengths)
    return LengthDist("fixed", low) if low == high else LengthDist("uniform", low=low, high=high)
