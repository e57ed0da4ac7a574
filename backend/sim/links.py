"""Links between simulated devices, from profiles/links/interconnects.toml: a tensor-parallel group's
all-reduces, an expert-parallel group's all-to-alls, a pipeline's stage-to-stage hops, and the
disaggregated policy's KV hand-offs all cross one of these.

A transfer of n bytes takes `us` microseconds plus n at `gbs`; a small collective (an all-reduce of
a decode step's few KB) takes `collective_us` plus its bytes at the ring's bus bandwidth
(parallel.py). No torch here.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace

from backend.errors import InputError

LINKS_FILE = "links/interconnects.toml"
FALLBACK = "pcie4-x16"   # a profile the file names no default link for


@dataclass(slots=True, frozen=True)
class KVLink:
    """One link: bandwidth one way, the fixed cost of a transfer, and of a small collective."""

    name: str
    gbs: float               # one direction, GB/s
    us: float                # per transfer (a KV hand-off, a pipeline hop), microseconds
    source: str = ""
    collective_us: float = 10.0   # per small all-reduce or all-to-all, microseconds

    def parts(self, nbytes: float) -> tuple[float, float]:
        """One transfer of `nbytes`: (seconds of its fixed cost, seconds of its bytes at the bandwidth)."""
        return self.us * 1e-6, nbytes / (self.gbs * 1e9)

    def seconds(self, nbytes: int) -> float:
        fixed_s, bytes_s = self.parts(nbytes)
        return fixed_s + bytes_s

    @property
    def is_pcie(self) -> bool:
        """GPUs that talk over PCIe (no NVLink): an engine's collectives reach their own fraction of it."""
        return self.name.startswith("pcie")

    def describe(self) -> str:
        return f"{self.name}, {self.gbs:,.1f} GB/s, {self.us:g} us per hand-off"

    def as_dict(self) -> dict:
        return {"name": self.name, "gbs": self.gbs, "us": self.us, "collective_us": self.collective_us,
                "source": self.source}


def _links_table() -> dict:
    from profiles import HERE
    with open(HERE / LINKS_FILE, "rb") as f:
        return tomllib.load(f)


def known_links() -> dict[str, KVLink]:
    table = _links_table()
    return {name: KVLink(name, float(v["gbs"]), float(v["us"]), v.get("source", ""),
                         float(v.get("collective_us", 10.0)))
            for name, v in table.get("links", {}).items()}


def list_links() -> list[str]:
    """The links' names, in the file's order (the window's Link choices)."""
    return list(known_links())


def default_link_name(profile) -> str:
    """The link a profile's devices have between them in one server: NVLink on SXM boards, PCIe on cards."""
    return _links_table().get("defaults", {}).get(profile.key, FALLBACK)


def device_link(name: str | None, profile) -> KVLink:
    """--link NAME (or the profile's default): what a replica's devices talk over."""
    links = known_links()
    chosen = name or default_link_name(profile)
    if chosen not in links:
        raise InputError(f"--link: unknown link {chosen!r} (known: {', '.join(links)})")
    return links[chosen]


def resolve_link(config, profile) -> KVLink:
    """--kv-link (or the profile's default link), with --kv-link-gbs and --kv-link-us over it."""
    e = config.engine
    links = known_links()
    defaults = _links_table().get("defaults", {})
    name = e.kv_link or defaults.get(profile.key) or (FALLBACK if e.kv_link_gbs is None else "custom")
    if name in links:
        link = links[name]
    elif e.kv_link is not None:
        raise InputError(f"--kv-link: unknown link {name!r} (known: {', '.join(links)})")
    else:
        link = KVLink(name, 0.0, 0.0, "given on the command line")
    if e.kv_link_gbs is not None:
        if e.kv_link_gbs <= 0:
            raise InputError(f"--kv-link-gbs must be positive, got {e.kv_link_gbs}")
        link = replace(link, gbs=e.kv_link_gbs, source="--kv-link-gbs" + (f" over {link.name}'s latency"
                                                                            if link.name in links else ""))
    if e.kv_link_us is not None:
        if e.kv_link_us < 0:
            raise InputError(f"--kv-link-us must not be negative, got {e.kv_link_us}")
        link = replace(link, us=e.kv_link_us)
    if link.gbs <= 0:
        raise InputError("--kv-link-gbs is needed for a custom link")
    return link
