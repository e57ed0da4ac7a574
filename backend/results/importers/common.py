"""What every importer shares: the imported run, the checks of the file's own figures, and the helpers
that turn per-request times into this tool's records.

An importer reads one tool's file into an `Imported`: the run in this tool's records (requests, tokens
where the file has them, a summary computed by backend.results.summary as for any run) and a list of
`Check`s, one per headline figure the file states: the file's value, the same figure recomputed from
the file's per-request data under the tool's own definition (to show the file is read right), and
this tool's figure under its own definition, with why the two definitions differ.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from backend.errors import InputError
from backend.records import RequestRecord, RequestStatus, RunData, TokenRecord
from backend.run_info import ImportedInfo, RunInfo, TargetKind, now_created
from backend.summary import Summary

NAN = float("nan")


@dataclass(slots=True)
class Check:
    """One headline figure of the file beside its recomputation and this tool's figure."""

    label: str                    # "TTFT mean (ms)"
    theirs: float | None          # as the file states it (None: the file does not state it)
    recomputed: float | None      # from the file's per-request data, the tool's definition (None: no data)
    ours: float | None = None     # this tool's definition over the same records (None: cannot be had)
    digits: int = 2               # the decimals the tool prints it with: "the last printed digit"
    why: str = ""                 # why this tool's definition gives another figure

    def printed(self, value: float | None) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "n/a"
        return f"{value:.{self.digits}f}"

    @property
    def reproduced(self) -> bool | None:
        """The file's figure equals its recomputation to the last digit the tool prints (None: nothing to check)."""
        if self.theirs is None or self.recomputed is None:
            return None
        return self.printed(self.theirs) == self.printed(self.recomputed)

    @property
    def definitions_differ(self) -> bool:
        if self.ours is None or self.recomputed is None:
            return False
        return self.printed(self.ours) != self.printed(self.recomputed)


@dataclass(slots=True)
class Imported:
    """One run read from another tool's file."""

    run: RunData
    checks: list[Check] = field(default_factory=list)
    name: str = ""                # a sub-folder's name when one file holds several runs (GuideLLM's benchmarks)
    notes: list[str] = field(default_factory=list)   # what the file lacks that its figures rest on


def read_json(path: Path, what: str):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read it as {what}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path} is not JSON ({exc.msg}, line {exc.lineno}): expected {what}") from None


def require(data: dict, keys: list[str], path: Path, what: str) -> None:
    """One line naming the keys a file of `what` must have and this one lacks."""
    missing = [k for k in keys if k not in data]
    if missing:
        raise InputError(f"{path}: not {what}: missing {', '.join(missing)} (expected {', '.join(keys)})")


def stats(values, percentiles=(50, 99)) -> dict[str, float]:
    """Mean and numpy's linearly interpolated percentiles, as vLLM and AIPerf compute them."""
    data = np.asarray(list(values), dtype=float)
    if data.size == 0:
        return {"mean": NAN, **{f"p{q:g}": NAN for q in percentiles}}
    return {"mean": float(data.mean()), **{f"p{q:g}": float(np.percentile(data, q)) for q in percentiles}}


def request_from_times(request_id: int, ok: bool, prompt_tokens: int, output_tokens: int, arrival_ms: float,
                       first_token_ms: float | None, last_token_ms: float | None, finish_ms: float | None,
                       reason: str = "") -> RequestRecord:
    """A request record as this tool's own client would have written it (TPOT: last - first token over n - 1)."""
    status = RequestStatus.FINISHED if ok else RequestStatus.ERROR
    return RequestRecord.from_times(request_id=request_id, status=status, prompt_tokens=prompt_tokens,
                                    output_tokens=output_tokens if ok else 0, arrival_ms=arrival_ms,
                                    first_token_ms=first_token_ms if ok else None,
                                    last_token_ms=last_token_ms if ok else None,
                                    finish_ms=finish_ms, finish_reason=reason)


def tokens_from_gaps(request_id: int, first_token_ms: float, gaps_ms) -> list[TokenRecord]:
    """Token records from the first token's time and the gaps after it (one token per gap)."""
    out = [TokenRecord(request_id, 0, first_token_ms)]
    t = first_token_ms
    for i, gap in enumerate(gaps_ms, start=1):
        t += gap
        out.append(TokenRecord(request_id, i, t))
    return out


def imported_run(tool: str, version: str | None, files: list[Path], model: str, requests: list[RequestRecord],
                 tokens: list[TokenRecord], config: dict, summary: Summary | None = None,
                 created: str = "", device: str = "") -> RunData:
    """The run folder's contents: records, this tool's summary over them, and who wrote the file."""
    from backend.records import new_run_id
    from backend.results.summary import summarize
    info = RunInfo(target=TargetKind.IMPORTED, model=model, device=device, created=created or now_created(),
                   imported=ImportedInfo(tool=tool, version=version, file=", ".join(str(f) for f in files)))
    if summary is None:
        summary = summarize([], requests, tokens)
    return RunData(run_id=new_run_id(), config={"mode": "load", "imported": config}, info=info, requests=requests,
                   tokens=tokens, summary=summary)


def number(data: dict, key: str):
    """A number from the file, None when it is absent or null."""
    value = data.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
