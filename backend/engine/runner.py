"""Executes whatever the scheduler hands it: tensors in, sampled token ids out. No policy here."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from backend.config import SamplingConfig
from backend.engine.cuda_graphs import StaticDecoder
from backend.engine.memory_fit import aligned
from backend.engine.spec.acceptance import accept_greedy, accept_sampled, inverse_cdf, keyed_uniform, target_probs
from backend.engine.warmup import WarmupStep, warmup_steps
from backend.errors import DoesNotFit, is_out_of_memory, one_line
from backend.kernels import matmath, ops
from backend.loaders.device import device_scope, synchronize
from backend.models import make_step_batch
from backend.models.base import KVCache
from backend.models.packed import pack_weights, step_weight_bytes


# A verification of at most this many tokens (its last token and the guesses) runs as decode rows: each
# row reads its request's keys itself, so a long one would read them once per guess (a prefill
# segment's attention reads them once per block of queries).
SHORT_VERIFICATION = 16


def sample(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None) -> torch.Tensor:
    """Next token per row of (R, vocab) logits: greedy at temperature 0, else temperature + nucleus."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        # drop a token once the mass before it already reaches top_p (the top token always stays)
        drop = sorted_probs.cumsum(dim=-1) - sorted_probs > top_p
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        choice = torch.multinomial(sorted_probs, 1, generator=generator)  # multinomial renormalizes
        return order.gather(-1, choice).squeeze(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def uses_cuda_graphs(device: torch.device, shape, asked: bool | None = None) -> bool:
    """Whether decode runs the static path (cuda_graphs.py): as asked, else on CUDA for a dense model
    (an MoE stays eager by default: its CUDA routing has no host read (moe.py), so a graph could hold
    it, but that waits on tests/engine/test_cuda_device.py passing on a GPU)."""
    return device.type == "cuda" and shape.num_experts == 0 if asked is None else asked


def kernel_math(device: torch.device, math: matmath.MatMath):
    """The C kernels' arithmetic for a step on the CPU (matmath.using); on any other device nothing,
    so that a GPU run never builds the CPU kernels (using() loads them, compiling on first use)."""
    return matmath.using(math) if device.type == "cpu" else contextlib.nullcontext()


@dataclass(frozen=True, slots=True)
class PagedPool:
    """The paged layout's pool as the scheduler counts it: its blocks are the cache's, table rows set per step."""

    block_size: int
    num_blocks: int


class Runner:
    """Owns the model's KV cache; runs one engine step and returns {request_id: sampled token}.

    On the CPU the model's matrices are packed for oneDNN once (backend/models/packed.py).
    use_cuda_graphs (default: on for CUDA but for a mixture of experts, off elsewhere) sends decode-only
    steps through the static-shape padded path of backend/engine/cuda_graphs.py, captured as CUDA graphs
    on a GPU and run eagerly elsewhere; the cache then holds one scratch slot more for the padding rows.
    """

    def __init__(self, loaded, num_slots: int, max_len: int, sampling: SamplingConfig,
                 use_cuda_graphs: bool | None = None, paged: PagedPool | None = None):
        self.loaded = loaded
        self.model = loaded.model
        self.device = loaded.device
        self.sampling = sampling
        self.use_cuda_graphs = uses_cuda_graphs(self.device, loaded.shape, use_cuda_graphs)
        pack_weights(self.model)   # a no-op off the CPU, or if already packed
        self.math = loaded.math.math if loaded.math is not None else matmath.FP32
        self._step_bytes: int | None = None   # step_reads' weights read whatever the tokens, taken once
        self.static = None
        self.paged = paged
        self._rows: dict[int, list[int]] = {}   # paged: each table row's blocks as last set
        # verifications run as decode rows where the C decode kernel serves them (not the static path's
        # fixed-size batch, whose rows are one per slot)
        self._verify_as_decode = ops.usable(self.device, loaded.dtype) and not self.use_cuda_graphs
        rows = num_slots + 1 if self.use_cuda_graphs else num_slots   # the graphs' padding rows write a scratch row
        if self.use_cuda_graphs:
            max_len = aligned(max_len)
        if paged is None:
            self.cache = KVCache(loaded.shape, rows, max_len, loaded.device, loaded.dtype)
        else:
            # the scheduler's blocks, and one more of the cache's own for the scratch row's padding writes
            extra = 1 if self.use_cuda_graphs else 0
            self.cache = KVCache(loaded.shape, rows, max_len, loaded.device, loaded.dtype, block_size=paged.block_size,
                                 num_blocks=paged.num_blocks + extra)
            self._rows_for_warmup(num_slots)
            if extra:
                self.cache.set_row(num_slots, [paged.num_blocks])
        if self.use_cuda_graphs:
            self.static = StaticDecoder(self.model, self.cache, scratch_slot=num_slots, max_batch=num_slots,
                                        capture=self.device.type == "cuda")

    def _rows_for_warmup(self, num_slots: int) -> None:
        """Paged: every row a full table of the pool's blocks (wrapping round a pool smaller than the rows'
        reach), so the warm-up's writes land in blocks; the run's requests then get their own (sync_rows).
        What the warm-up leaves in a block is never read: the scheduler caches only blocks a request filled."""
        per_row, pool = self.cache.max_blocks_per_row, self.paged.num_blocks
        for row in range(num_slots):
            self.cache.set_row(row, [(row * per_row + j) % pool for j in range(per_row)])

    def sync_rows(self, out) -> None:
        """Paged: the block table's row of every request in this step holds its blocks (the scheduler's
        block_ids: grown by a step, replaced after a preemption or for the next request in the row)."""
        rows = self._rows
        for request in [c.request for c in out.prefill] + out.decode:
            blocks = request.block_ids
            if rows.get(request.slot) != blocks:
                self.cache.set_row(request.slot, blocks)
                rows[request.slot] = list(blocks)

    def run(self, out) -> dict[int, int]:
        """One forward pass over every token in the scheduler's output; samples where a sequence ends.

        A decode with guesses (spec_ids) runs its last token and the guesses with logits at each position:
        on the C kernels as that many decode rows of its table row (a decode step's price), elsewhere as a
        prefill segment; out.accepted gets how many guesses it keeps, the returned token is the one after
        them (acceptance.py)."""
        if self.paged is not None:
            self.sync_rows(out)
        prefill, samplers = [], []
        for chunk in out.prefill:
            req = chunk.request
            ids = req.all_ids
            start = req.num_computed
            prefill.append((req.slot, start, ids[start:start + chunk.num_tokens]))
            # a chunk that does not reach the end of the known tokens samples nothing
            samplers.append(req.request_id if start + chunk.num_tokens == len(ids) else None)
        verifying = [req for req in out.decode if req.spec_ids] if out.num_draft_tokens else []
        plain = [req for req in out.decode if not req.spec_ids] if verifying else out.decode
        decode = [(req.slot, req.num_computed, req.output_ids[-1] if req.output_ids else req.prompt_ids[-1])
                  for req in plain]
        every_row = ()
        if verifying and self._verify_as_decode and all(len(req.spec_ids) < SHORT_VERIFICATION for req in verifying):
            # K+1 decode rows of one table row, each at its own position: the fused decode kernel writes
            # every row's key first, so each row sees the ones before it (causal within the segment), and
            # the step pays a decode step's price, not the layer-by-layer prefill path's. The logits'
            # rows come out in the same order as the segments' would (verifications, then plain decodes).
            decode = [(req.slot, req.num_computed + i, token) for req in verifying
                      for i, token in enumerate([req.all_ids[req.num_computed]] + req.spec_ids)] + decode
        else:
            every_row = range(len(prefill), len(prefill) + len(verifying))
            prefill += [(req.slot, req.num_computed, [req.all_ids[req.num_computed]] + req.spec_ids)
                        for req in verifying]
        # the logits' rows: one per chunk, 1 + guesses per verification, one per plain decode
        rows = [i for i, rid in enumerate(samplers) if rid is not None]
        spans, row = [], len(samplers)
        for req in verifying:
            spans.append(row)
            row += 1 + len(req.spec_ids)
        rows += range(row, row + len(plain))
        samplers += [None] * (row - len(samplers)) + [req.request_id for req in plain]
        with device_scope(self.device), torch.inference_mode(), kernel_math(self.device, self.math):
            if self.static is not None and not prefill:
                slots, positions, ids = (list(column) for column in zip(*decode))
                logits = self.static.decode(slots, positions, ids)   # (D, vocab)
            else:
                batch = make_step_batch(prefill, decode, self.device, every_row)
                logits = self.model(batch, self.cache)  # (M, vocab)
            result = {}
            if rows:
                picked = logits if len(rows) == len(samplers) else logits[rows]
                ids = [samplers[i] for i in rows]
                result = dict(zip(ids, self._sample(picked, ids, out)))
            if verifying:
                self._verify(logits, verifying, spans, out.accepted, result)
            if not result:
                synchronize(self.device)
        return result

    def _sample(self, logits: torch.Tensor, request_ids: list[int], out) -> list[int]:
        """Next token per row of (R, vocab) logits (request_ids[i]'s): greedy at temperature 0, else from the
        same distribution as sample()'s at the uniform keyed by (seed, request, output position)
        (spec/acceptance.py), so a request's tokens do not depend on what shared its steps or whether they
        verified guesses."""
        temperature, top_p = self.sampling.temperature, self.sampling.top_p
        if temperature <= 0:
            return logits.argmax(dim=-1).tolist()
        # where each sampled token lands: the request's output so far
        done = {r.request_id: len(r.output_ids) for r in [c.request for c in out.prefill] + out.decode}
        seed = self.sampling.seed
        return inverse_cdf(target_probs(logits, temperature, top_p),
                           [keyed_uniform(seed, rid, done[rid]) for rid in request_ids])

    def _verify(self, logits: torch.Tensor, verifying, spans: list[int], accepted: dict[int, int],
                result: dict[int, int]) -> None:
        """Each verification's kept guesses (into `accepted`) and next token (into `result`)."""
        first, last = spans[0], spans[-1] + 1 + len(verifying[-1].spec_ids)
        temperature = self.sampling.temperature
        if temperature <= 0:
            best = logits[first:last].argmax(dim=-1).tolist()   # one read of every verified row
            for req, start in zip(verifying, spans):
                at = start - first
                accepted[req.request_id], result[req.request_id] = accept_greedy(
                    best[at:at + 1 + len(req.spec_ids)], req.spec_ids)
            return
        probs = target_probs(logits[first:last], temperature, self.sampling.top_p)   # (rows, vocab)
        seed = self.sampling.seed
        for req, start in zip(verifying, spans):
            at, done = start - first, len(req.output_ids)
            accepted[req.request_id], result[req.request_id] = accept_sampled(
                probs[at:at + 1 + len(req.spec_ids)], req.spec_ids,
                [keyed_uniform(seed, req.request_id, done + i) for i in range(1 + len(req.spec_ids))])

    def step_reads(self) -> tuple[int, int]:
        """What the last step read: (distinct experts touched, summed over layers; bytes of weights).

        A dense model reads all its weights; an MoE its shared ones and the experts it touched (on CUDA
        counted on the device, layer by layer: this read, after the step, is their one sync)."""
        touched, read, every = getattr(self.model, "experts_read", lambda: (0, 0.0, 0.0))()
        if self._step_bytes is None:   # the weights never change form after the runner is built
            self._step_bytes = step_weight_bytes(self.model)
        return int(touched), int(self._step_bytes - every + read)

    def warmup(self, steps: list[WarmupStep] | None = None) -> None:
        """Untimed passes through every step shape the run will time (engine/warmup.py; None: those of a
        continuous run with this runner's slots, cache, sampling and window) and, on a GPU, the graph
        captures, so one-time costs stay out of the figures. Writes slots 0 and 1 and the scratch slot;
        samples with a generator of its own (the run's draws are keyed by request and position, not streamed)."""
        if steps is None:
            steps = warmup_steps("continuous", self.cache.num_slots - (self.static is not None), self.cache.max_len,
                                 temperature=self.sampling.temperature, window=self.loaded.shape.sliding_window)
        vocab = self.loaded.shape.vocab_size
        draws = torch.Generator(device=self.device) if self.sampling.temperature > 0 else None
        with device_scope(self.device), torch.inference_mode(), kernel_math(self.device, self.math):
            for step in steps:
                prefill = [(slot, start, [(slot + start + i) % vocab for i in range(length)])
                           for slot, start, length in step.prefill]
                decode = [(slot, position, (slot + position) % vocab) for slot, position in step.decode]
                logits = self.model(make_step_batch(prefill, decode, self.device), self.cache)
                if step.samples:   # steps made for a sampling run may warm a greedy runner (a draft model's)
                    if draws is not None:
                        draws.manual_seed(0)
                    sample(logits, self.sampling.temperature, self.sampling.top_p, draws)
            if self.static is not None:
                self.static.warmup()
        synchronize(self.device)


def build_runner(loaded, num_slots: int, max_len: int, sampling: SamplingConfig,
                 use_cuda_graphs: bool | None = None, warmup: list[WarmupStep] | None = None,
                 paged: PagedPool | None = None) -> Runner:
    """A Runner warmed up on `warmup`'s step shapes (None: a continuous run's) with its graphs captured, built on the model's device as the current one
    (device_scope: cuda:1 captures on cuda:1). An out-of-memory error while building, warming up
    or capturing is refused in one line (DoesNotFit), its memory given back first."""
    stage = "allocating the KV cache"
    try:
        with device_scope(loaded.device):
            runner = Runner(loaded, num_slots, max_len, sampling, use_cuda_graphs, paged)
            stage = "warming up" + (" and capturing the CUDA graphs" if runner.static is not None
                                    and runner.static.capture else "")
            runner.warmup(warmup)
        return runner
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        line = one_line(exc, limit=160)
    runner = None
    if loaded.device.type == "cuda":
        import gc
        gc.collect()               # a half-built runner in a reference cycle holds its tensors until collected
        torch.cuda.empty_cache()   # the failed runner's blocks, back to the driver for the next try
    raise DoesNotFit(f"out of memory on {loaded.device} while {stage} for {num_slots:,} sequences of "
                     f"{max_len:,} tokens ({line}): lower the batch size or the lengths")
