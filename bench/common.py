"""What every benchmark repeats: the machine line, its table written into bench/README.md, and two
sides (ours and a peer, or two variants of ours) timed in alternating rounds.

A benchmark runs from the repository's root as `python -m bench.<name>`; with `--readme` it writes
its report between its own markers in bench/README.md (`<!-- <name>:begin -->` ... `<!-- <name>:end -->`),
replacing the previous one: the README holds each benchmark's latest table, git holds the rest.

Nothing here imports torch: some benchmarks (the remote driver's, the simulator's speed) never load it.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import platform
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parents[1]   # the repository: a child process started with `-m bench.x` runs here
README = ROOT / "bench" / "README.md"
# /proc/cpuinfo's flags that decide which kernels run (the C kernels' vector width, the bfloat16
# unit), as the machine line names them
UNITS = {"avx2": "avx2", "avx512f": "avx512", "avx512_vnni": "avx512_vnni", "avx512_bf16": "avx512_bf16",
         "amx_bf16": "amx",
         # ARM, from Linux's "Features" line
         "asimd": "neon", "asimddp": "dotprod", "i8mm": "i8mm", "sve": "sve", "bf16": "bf16"}

T = TypeVar("T")


def log(message: str) -> None:
    """Progress on stderr, so that stdout is the report alone."""
    print(f"... {message}", file=sys.stderr, flush=True)


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what the platform reports."""
    for line in _cpuinfo():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "CPU"


def cpu_units() -> list[str]:
    """The vector and matrix units of UNITS this CPU has (empty without /proc)."""
    flags: set[str] = set()
    for line in _cpuinfo():
        if line.startswith(("flags", "Features")):   # x86, ARM
            flags = set(line.split(":", 1)[1].split())
            break
    return [name for flag, name in UNITS.items() if flag in flags]


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def version_of(package: str) -> str | None:
    """An installed package's version, without importing it (importing torch takes seconds)."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_line(*extra: str) -> str:
    """'AMD EPYC 9R14 (avx2, avx512, avx512_bf16), 2 cores, torch 2.13.0+cpu, Python 3.11.7' and the extras."""
    units = cpu_units()
    cpu = f"{cpu_model()} ({', '.join(units)})" if units else cpu_model()
    torch = version_of("torch")
    parts = [cpu, f"{os.cpu_count()} cores", *([f"torch {torch}"] if torch else []),
             f"Python {platform.python_version()}", *extra]
    return ", ".join(parts)


def measured_line(*extra: str) -> str:
    """The first line of every report: the date and the machine."""
    return f"Measured {datetime.date.today()} on {machine_line(*extra)}."


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def write_table(name: str, text: str, readme: Path = README) -> None:
    """`text` into the README between `name`'s markers, in place of what was there."""
    begin, end = markers(name)
    body = readme.read_text(encoding="utf-8")
    if begin not in body or end not in body:
        raise SystemExit(f"{readme} has no {begin} ... {end} markers to write between")
    head, rest = body.split(begin, 1)
    tail = rest.split(end, 1)[1]
    readme.write_text(f"{head}{begin}\n{text}\n{end}{tail}", encoding="utf-8")


def add_readme_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--readme", action="store_true",
                        help="also write the report into bench/README.md, in place of this benchmark's table")


def publish(name: str, lines: Sequence[str] | str, readme: bool) -> int:
    """Print the report; with `readme`, write it between `name`'s markers too. 0, for main's return."""
    text = lines if isinstance(lines, str) else "\n".join(lines)
    print(text)
    if readme:
        write_table(name, text)
    return 0


def in_order(rnd: int, sides: Sequence[T]) -> Sequence[T]:
    """The sides in round `rnd`'s order: as given in warm-up rounds (numbered below 0) and in even rounds,
    reversed in odd ones (A B, B A, ...), so that load drifting on a shared machine falls on both alike.
    Three or more sides also rotate every two rounds (A B C, C B A, B C A, A C B, ...): reversing alone
    would keep the middle one always between the others, after another process's step every time."""
    if rnd < 0:
        return sides
    if len(sides) > 2:
        shift = (rnd // 2) % len(sides)
        sides = list(sides[shift:]) + list(sides[:shift])
    return sides[::-1] if rnd % 2 else sides


def alternating(repeats: int, sides: Sequence[T], warmup: int = 1) -> Iterator[tuple[int, Sequence[T]]]:
    """(round, the sides in that round's order): `warmup` rounds numbered below 0, whose figures are not
    to be kept, then rounds 0..repeats-1."""
    for rnd in range(-warmup, repeats):
        yield rnd, in_order(rnd, sides)


def interleaved(repeats: int, *runs: Callable[[bool], T]) -> list[list[T]]:
    """Each run called once as a warm-up (`run(True)`), then `repeats` alternating rounds (`run(False)`);
    the kept results, one list per run."""
    kept: list[list[T]] = [[] for _ in runs]
    for rnd, order in alternating(repeats, list(enumerate(runs))):
        for i, run in order:
            result = run(rnd < 0)
            if rnd >= 0:
                kept[i].append(result)
    return kept


def median_ms(seconds: Sequence[float]) -> float:
    return statistics.median(seconds) * 1000


def ratio_median(numerators: Sequence[float], denominators: Sequence[float]) -> float:
    """The median of round-by-round ratios: robust to load that drifts between rounds."""
    return statistics.median(n / d for n, d in zip(numerators, denominators))


def drive_engine(runner, specs, policy: str, max_batch: int, max_len: int, run_id: str = "bench", speculator=None):
    """`specs` through the scheduler (`policy`, `max_batch` slots of `max_len` tokens, --ignore-eos) and
    the engine loop on `runner` (guessing with `speculator` where one is given): the recorder, with the
    run's steps and tokens. A run's error raises."""
    from backend.config import RunConfig
    from backend.engine.loop import Engine
    from backend.engine.scheduler import Scheduler, SchedulerConfig
    from backend.results.recorder import RunRecorder
    from backend.workload.arrivals import FixedSource
    scheduler = Scheduler(SchedulerConfig(policy=policy, max_batch=max_batch, kv_capacity=max_batch * max_len,
                                          max_len=max_len))
    records = RunRecorder(RunConfig(), lambda event: None)
    result = Engine(scheduler, runner, run_id, ignore_eos=True, speculator=speculator).run(FixedSource(specs), records.emit, lambda: False)
    if result.error:
        raise RuntimeError(result.error)
    return records
