"""The theoretical prefix-cache hit rate of a run's own workload, printed beside the measured one.

The workload source replays itself on a virtual clock (WorkloadSource.prompts_and_outputs) and its
prompts go through backend.engine.kv_blocks.theoretical_hit_rate twice: an infinite cache (what the
workload itself allows: no cache finds more) and an LRU pool of the run's own number of blocks. Both
replay one request at a time, so a measured rate below the sized one is the cost of concurrency
(requests running together hold their blocks at once; one admitted before another has computed
their shared prefix finds nothing), and a sized rate below the infinite one is the cost of the
pool's size. A remote server's pool is unknown: only the infinite ceiling is given there.
The figures are computed by backend.targets.engine_run.ceiling_figures (above the engine's layers,
which results sit below); this module only words them.
"""
from __future__ import annotations


def ceiling_text(s) -> str:
    """'; theoretical (...)' for a console line, or '' when the summary has no ceiling."""
    if s.prefix_ideal_hit_rate is None:
        return ""
    text = f"; theoretical (one at a time, {s.prefix_ideal_block_size}-token blocks): infinite cache " \
           f"{100 * s.prefix_ideal_hit_rate:.1f}%"
    if s.prefix_ideal_sized_hit_rate is not None:
        text += f", this cache ({s.prefix_ideal_num_blocks:,} blocks) {100 * s.prefix_ideal_sized_hit_rate:.1f}%"
    return text
