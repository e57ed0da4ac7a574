"""What a runner will allocate on its device, and whether that fits: the local engine's one memory
check, run before anything is allocated. Plain arithmetic, no torch: the device's figures come in
as numbers, so the tests give it an allocator's state instead of a GPU.

On a CUDA device a failed allocation is an error, so everything the runner takes is counted:

  * the KV cache as the runner allocates it: with CUDA graphs one slot more (the padding rows'
    scratch slot) and the length rounded up to MASK_ALIGN (cuda_graphs.py's static key length);
  * the graphs' memory pool: the activations of the largest decode bucket's step (one layer's
    worth: the pool reuses them layer after layer) with its gathered K and V and its float32
    scores, and the bucket's logits;
  * the logits buffer the sampler reads (max_batch x vocab, float32);
  * the eager steps' workspace: the largest step's activations (its tokens x one layer's widths, in
    the model's dtype; attention's scores are not counted: the kernels that do not materialise them
    are the ones a long prompt must take);
  * CUDA_HEADROOM for what no formula gives: cuBLAS and cuDNN workspaces, the allocator's
    rounding and fragmentation, the CUDA context's own growth.

The free figure it is compared with (backend/loaders/weights.free_memory) is, on CUDA, what the
driver reports free plus what torch's caching allocator holds without using (`reserved -
allocated`): memory a previous runner of this process released, which the next one reuses.

On the CPU (and MPS) the check counts the KV cache alone, as before: the operating system pages
rather than failing, and the check is there to refuse a cache that could never fit.
"""
from __future__ import annotations

from dataclasses import dataclass

from backend.shape import KV_BLOCK_SIZE

MASK_ALIGN = 16                  # the static decode path's key length is padded to this (fused attention wants aligned masks)
CUDA_HEADROOM = 512 * 2**20      # bytes kept free on a CUDA device beyond what is counted
FLOAT32 = 4


def aligned(length: int) -> int:
    """A cache length rounded up to MASK_ALIGN."""
    return -(-length // MASK_ALIGN) * MASK_ALIGN


@dataclass(slots=True, frozen=True)
class RunnerMemory:
    """What a runner allocates on its device, in bytes, by part."""

    kv: int
    graph_pool: int = 0
    logits: int = 0
    workspace: int = 0
    headroom: int = 0

    @property
    def total(self) -> int:
        return self.kv + self.graph_pool + self.logits + self.workspace + self.headroom

    def describe(self) -> str:
        """'KV cache 1.00 GiB + CUDA graphs 0.10 GiB + ...': the parts that are not zero."""
        parts = (("KV cache", self.kv), ("CUDA graphs", self.graph_pool), ("logits", self.logits),
                 ("workspace", self.workspace), ("headroom", self.headroom))
        return " + ".join(f"{name} {gib(n)}" for name, n in parts if n)


def gib(n: int) -> str:
    return f"{n / 2**30:,.2f} GiB"


def runner_memory(shape, num_slots: int, max_len: int, dtype_bytes: int, device_type: str, graphs: bool,
                  step_tokens: int) -> RunnerMemory:
    """What a Runner of `num_slots` slots of `max_len` tokens takes on a device of this type.

    `graphs`: decode runs the static path (cuda_graphs.py), so the cache has a scratch slot and an
    aligned length; `step_tokens`: the most tokens an eager step (a prefill chunk) carries. The
    cache is whole blocks (models/base.py, KVCache): a slot's length is rounded up to one."""
    slots, length = (num_slots + 1, aligned(max_len)) if graphs else (num_slots, max_len)
    length = -(-length // KV_BLOCK_SIZE) * KV_BLOCK_SIZE
    kv = slots * length * shape.kv_bytes_per_token(dtype_bytes)
    if device_type != "cuda":
        return RunnerMemory(kv)
    widths = _layer_widths(shape)
    pool = 0
    if graphs:
        batch = num_slots
        gathered = 2 * batch * shape.num_kv_heads * length * shape.head_dim * dtype_bytes   # K and V of every row
        scores = batch * shape.num_heads * length * FLOAT32                                  # (B, heads, 1, L)
        pool = batch * widths * dtype_bytes + gathered + scores + batch * shape.vocab_size * dtype_bytes
    logits = num_slots * shape.vocab_size * FLOAT32
    workspace = max(1, step_tokens) * widths * dtype_bytes
    return RunnerMemory(kv, pool, logits, workspace, CUDA_HEADROOM)


def _layer_widths(shape) -> int:
    """Activations of one token through one layer, in elements: the residual and its norm, q, k, v,
    attention out, and the MLP's gate, up and product."""
    q = shape.num_heads * shape.head_dim
    kv = 2 * shape.num_kv_heads * shape.head_dim
    return 3 * shape.hidden_size + 2 * q + kv + 3 * shape.intermediate_size


def shortfall(need: RunnerMemory, free: int | None) -> bool:
    """Whether `need` does not fit in `free` bytes (never, when the free memory cannot be told)."""
    return free is not None and need.total > free
