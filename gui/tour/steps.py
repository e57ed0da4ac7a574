"""The tour's steps: what each says, the runs it makes, and how its finding is measured. Qt-free.

Each step is one or more ordinary RunConfigs, run one after another through the window's own
run machinery (the engine process, the live views); its finding is computed from their records
(gui/tour/measure.py). Sizes are chosen so that each step ends within a minute on a 2-core CPU
with the bundled model (docs/window.md, "Learn: the tour", has the times measured).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

from backend.results.example import OUTPUT_LEN as EXAMPLE_OUTPUT, PROMPT_LEN as EXAMPLE_PROMPT, SEED_ROW
from backend.config import (BatchRun, EngineConfig, ModelChoice, RunConfig, RunKind, SamplingConfig, SpecConfig,
                            SweepKind, SweepSpec)
from backend.workload.spec import LengthDist, WorkloadSpec

from gui.tour import batch, definitions, measure, speculation
from gui.tour.finding import Finding, Outcome

MODEL = "smollm2-135m"          # the bundled model
EXAMPLE_PROFILE = "h100-sxm"    # the datacenter GPU of the worked example
EXAMPLE_MODEL = "llama-8b"


@dataclass(frozen=True)
class TourStep:
    key: str                                               # file names: docs/tour-<n>-<key>.png
    title: str
    text: str                                              # for a reader who has never served a model
    look: str                                              # what to look at in the figure
    runs: Callable[[], list[tuple[str, RunConfig]]]        # fresh configs, run in this order
    measure: Callable[[list[Outcome]], Finding]
    view: str = "live"            # the window's view its runs feed, in front while they run: live, throughput, precision
    uses_roofline: bool = False   # its figure draws this machine's roofline: calibrate first if never done


def _model() -> ModelChoice:
    return ModelChoice(MODEL)


def _greedy() -> SamplingConfig:
    return SamplingConfig(ignore_eos=True)   # every request produces its full output: the same steps every time


def _one(prompt_len: int, output_len: int) -> RunConfig:
    return RunConfig(mode=RunKind.BATCH, model=_model(), sampling=_greedy(),
                     batch=BatchRun(prompt_len=prompt_len, output_len=output_len, batch=1))


def _load(policy: str, workload: WorkloadSpec, max_batch: int = 4, chunk_tokens: int = 512) -> RunConfig:
    return RunConfig(mode=RunKind.LOAD, model=_model(), sampling=_greedy(), workload=workload,
                     engine=EngineConfig(policy=policy, max_batch=max_batch, chunk_tokens=chunk_tokens))


def _burst() -> WorkloadSpec:
    return WorkloadSpec("tour-burst", num_requests=8, arrival="burst", rate=None, prompt_len=LengthDist("fixed", 32),
                        output_len=LengthDist("uniform", low=2, high=48), description="8 requests at once")


def _long_prompts() -> WorkloadSpec:
    # each prompt must arrive while the one before still decodes, or there is no decode to stall: with 16
    # output tokens one every 0.67 s, a quiet machine (4 ms a decode step) had finished each request
    # long before the next came, and the longest "stall" was 9 ms
    return WorkloadSpec("tour-long-prompts", num_requests=6, arrival="constant", rate=4.0,
                        prompt_len=LengthDist("uniform", low=32, high=256), output_len=LengthDist("fixed", 64),
                        description="prompts of up to 256 tokens arriving while others decode")


def _handoffs() -> WorkloadSpec:
    """Fewer and shorter prompts than _long_prompts: two more engine processes start and load the model."""
    return WorkloadSpec("tour-handoffs", num_requests=4, arrival="constant", rate=1.5,
                        prompt_len=LengthDist("uniform", low=32, high=160), output_len=LengthDist("fixed", 12),
                        description="prompts of up to 160 tokens handed from a prefill engine to a decode engine")


def _mixed_lengths() -> WorkloadSpec:
    """Answers of 4 to 64 tokens, prompts arriving while others decode: requests unlike each other, some paused."""
    return WorkloadSpec("tour-mixed-lengths", num_requests=8, arrival="constant", rate=4.0,
                        prompt_len=LengthDist("uniform", low=32, high=192), output_len=LengthDist("uniform", low=4, high=64),
                        description="answers of 4 to 64 tokens, prompts arriving while others decode")


def _runs_one_request():
    return [("one request", _one(128, 32))]


def _runs_prompt_lengths():
    return [(f"prompt {n}", _one(n, 12)) for n in (32, 128, 512)]


def _runs_precision():
    return [("precision sweep", RunConfig(mode=RunKind.SWEEP_PRECISION, model=_model(), sampling=_greedy(),
                                          sweep=SweepSpec(kind=SweepKind.PRECISION, dtypes=["float32", "q4_1"],
                                                          prompt_len=32, output_len=8, batch=1, steps=1, warmup=1)))]


def _runs_batch():
    # 8 timed steps a point, their median: with 2, one step slowed by another program (the 2-core machine
    # shared) moved a point by half and bent the curve; 6 more decode steps cost under a second in all
    return [("batch sweep", RunConfig(mode=RunKind.SWEEP_BATCH, model=_model(), sampling=_greedy(),
                                      sweep=SweepSpec(kind=SweepKind.BATCH, batches=[1, 2, 4, 8, 16], context=32,
                                                      steps=8, warmup=1)))]


def _runs_static_continuous():
    return [(policy, _load(policy, _burst())) for policy in ("static", "continuous")]


def _runs_chunked():
    return [("continuous", _load("continuous", _long_prompts())),
            ("chunked", _load("chunked", _long_prompts(), chunk_tokens=32))]


def _runs_disaggregated():
    return [("disaggregated", _load("disaggregated", _handoffs()))]


def _runs_tpot():
    return [("continuous", _load("continuous", _mixed_lengths()))]


# input-grounded: the answer copies the prompt, where prompt lookup's guesses hold (docs/speculative.md)
SPEC_PROMPT = ("Repeat the following text exactly: The committee met on Tuesday to review the budget and agreed "
               "to meet again next week.")


def _spec_run(method: str) -> RunConfig:
    return RunConfig(mode=RunKind.BATCH, model=_model(), sampling=_greedy(),
                     batch=BatchRun(prompt=SPEC_PROMPT, chat=True, output_len=24, batch=1),
                     spec=SpecConfig(method=method, num_tokens=4))


def _runs_speculation():
    return [("plain decode", _spec_run("")), ("ngram K=4", _spec_run("ngram"))]


def _runs_example():
    return [("worked example", RunConfig(mode=RunKind.BATCH, model=ModelChoice(EXAMPLE_MODEL),
                                         batch=BatchRun(prompt_len=EXAMPLE_PROMPT, output_len=EXAMPLE_OUTPUT),
                                         engine=EngineConfig(policy="static", max_batch=1), sampling=_greedy(),
                                         profile=EXAMPLE_PROFILE, simulate=True))]


STEPS: list[TourStep] = [
    TourStep(
        "one-request", "One request: one prefill, many decode steps",
        "A language model answers one token at a time. Before the first one it must read your whole prompt: that "
        "is the prefill, a single pass of the model over every prompt token at once. Then comes the decode: one "
        "pass per further token, each pass producing one token and feeding it back in.\n\n"
        "Two numbers describe a request: the time to the first token (TTFT), which the prefill sets, and the time "
        "per output token after it (TPOT), one decode step. This step runs one request of 128 prompt tokens "
        "and 32 output tokens on this machine.",
        "The orange bar is the prefill: many tokens, one step. The blue bars are the decode: one token each, one "
        "after another. Compare the prefill's width with the time all the thin blue steps take together.",
        _runs_one_request, measure.one_request),
    TourStep(
        "prompt-length", "A longer prompt: prefill grows, decode does not",
        "Prefill does arithmetic for every prompt token, so a prompt four times longer costs about four times the "
        "work. A decode step computes one token, but to do so it reads every weight of the model from memory, and "
        "that reading, not the arithmetic, is what takes its time; the weights are the same whatever the "
        "prompt.\n\nThis step runs one request at each of three prompt lengths and times its prefill and its "
        "decode steps.",
        "The orange line (prefill) climbs with the prompt; the blue line (one decode step) stays nearly flat. The "
        "labels at the right give each line's growth from the shortest prompt to the longest.",
        _runs_prompt_lengths, measure.prompt_lengths),
    TourStep(
        "precision", "Fewer bytes per weight: decode speeds up, prefill stays",
        "A model's weights can be stored with fewer bits: 32-bit floats, or integers of a few bits with a scale "
        "per block of weights (q4_1: about 5.7 bits, the bundled file's own format). Fewer bits mean fewer bytes "
        "to read, and reading the weights is what a decode step waits on. Prefill is bound by arithmetic "
        "instead, which still happens in full precision, so it gains little.\n\nThis step loads the model at two "
        "precisions and times a prefill and the decode steps at each.",
        "Everything is relative to float32 (1 at the left). The grey dashed line is the bytes a step reads. Where "
        "decode waits on memory, the blue line (decode) falls with it while the orange line (prefill) stays near 1; "
        "when other programs keep the cores busy, the cores become the limit instead and the blue line stays up.",
        _runs_precision, measure.precisions, view="precision"),
    TourStep(
        "batch", "Batching: many requests for the price of one read",
        "Since a decode step spends its time reading the weights, one step can serve several requests at once "
        "for nearly the same price: the weights are read once and used for every request in the batch. So "
        "throughput (tokens per second, all requests together) climbs with the batch, until the arithmetic "
        "catches up with the reading: the crossover, which a roofline model predicts from the machine's "
        "arithmetic speed and memory bandwidth.\n\nThis step decodes batches of 1 to 16 requests.",
        "The blue line is measured; the green dashed one is the roofline of this machine's profile (the tour "
        "measures this machine first if it never was: Run › Calibrate), its crossover the vertical line. The grey "
        "dashed line is a fit of the whole measured curve (a fixed cost a step plus a cost a request); the red arrow "
        "marks where it bends: where the measured growth slows. The gap between blue and green is what the roofline "
        "leaves out.",
        _runs_batch, batch.batch_sweep, view="throughput", uses_roofline=True),
    TourStep(
        "static-continuous", "Static against continuous batching",
        "A server batches the requests that arrive. Static batching takes up to four of them, runs them together, "
        "and starts the next four only once the longest of the batch is done: a short request's slot sits idle. "
        "Continuous batching decides at every step: as soon as one request ends, a waiting one takes its "
        "place.\n\nThis step sends the same 8 requests at once, with outputs of 2 to 48 tokens, under each "
        "policy with room for 4 at a time.",
        "Each request has two bars: grey under static batching, blue under continuous. The first four start "
        "together under both. Look at the fifth: under static batching it waits for the whole first batch to end, "
        "under continuous batching only for the first request of it.",
        _runs_static_continuous, measure.static_continuous),
    TourStep(
        "chunked", "Chunked prefill: no more stalls",
        "Under continuous batching a newly arrived prompt is prefilled in a step of its own, and every request "
        "already decoding waits for that step: its next token is late (a stall). Chunked prefill cuts the prompt "
        "into slices of a fixed number of tokens and puts one slice into each step beside the decodes, so no "
        "step is long.\n\nThis step sends six requests with prompts of up to 256 tokens and 64 output tokens, one "
        "every 0.25 s, first under continuous batching, then with chunks of 32 tokens.",
        "Each dot is the wait between two tokens of one request. The orange dots high up are decodes that waited "
        "for a whole prompt's prefill; the purple ones (chunked) stay low.",
        _runs_chunked, measure.chunked),
    TourStep(
        "disaggregated", "Disaggregation: prefill and decode on separate engines",
        "Another way to keep prompts from stalling decodes is to run them elsewhere: one engine only prefills, "
        "another only decodes, and each prompt's KV cache (what the model remembers of the prompt) is handed "
        "from the first to the second. Large deployments do this on separate GPUs; here both engines share this "
        "machine's cores, so they slow each other down, but the separation shows.\n\nThis step sends four "
        "requests with prompts of up to 160 tokens through a prefill engine and a decode engine.",
        "The lower row is the decode engine: only short blue steps. The upper row is the prefill engine. The "
        "shaded span is its longest prompt: the decode engine keeps stepping beside it.",
        _runs_disaggregated, measure.disaggregated),
    TourStep(
        "worked-example", "The worked example on a datacenter GPU (simulated)",
        "The numbers that started this project: an 8-billion-parameter model on a datacenter GPU, a "
        "2,000-token prompt and 300 output tokens. Worked out by hand: TTFT about 200 ms, TPOT about 20 ms, "
        "6,200 ms in all, 97% of it decoding.\n\nThis machine has no such GPU, so this step SIMULATES it: the "
        "same scheduler runs, and each step is priced by a cost model from the H100's datasheet (its arithmetic "
        "speed and memory bandwidth) instead of being measured. Nothing here ran on a GPU.",
        "The prefill is the one orange bar at the start; the 299 blue decode steps fill the rest. Read the "
        "shaded spans' labels against the seed's numbers in the sentence below.",
        _runs_example, partial(measure.worked_example, seed_row=SEED_ROW)),
    TourStep(
        "tpot-definitions", "Why two tools print different TPOTs for the same run",
        "Benchmark tools all report a TPOT or an ITL (inter-token latency), but they do not average the same "
        "things. One averages each request's gaps between tokens first, then averages the requests (this window's "
        "TPOT; GuideLLM calls it ITL). Another pools every gap of every request and averages those (vLLM's and "
        "SGLang's ITL), so a long answer counts once per token. vLLM's TPOT also runs to the stream's end, not to "
        "the last token. And a server that streams several tokens in one chunk gives a per-chunk tool one gap "
        "where a per-token one sees several.\n\nThis step sends 8 requests with answers of 4 to 64 tokens, their "
        "prompts arriving while others decode, and computes each definition from the same token times.",
        "Grey dots are every gap, at their request's length; blue squares each request's own mean. The two dashed "
        "lines are the two averages: the blue one weighs every request alike, the orange one every gap. The arrow "
        "marks the request whose mean a pause raised most.",
        _runs_tpot, definitions.tpot_definitions),
    TourStep(
        "speculation", "Speculative decoding: several tokens for one step",
        "A decode step reads every weight to produce one token, and at batch 1 the arithmetic units mostly wait. "
        "Speculative decoding gives them work: a cheap proposer guesses the next few tokens, and the model checks "
        "the last token and all the guesses in one step, like a short prefill. Every guess the model agrees with "
        "is a token that took no step of its own; the first it disagrees with is replaced by its own choice, so "
        "the text is exactly what plain decoding gives.\n\nThe proposer here needs no second model: it looks for "
        "the last few tokens earlier in the prompt and guesses what followed them (n-gram, 4 guesses). This step "
        "asks the model to repeat a sentence, decoded plainly and then with guesses.",
        "Blue dots are plain decode steps (one token), magenta diamonds verification steps (the last token and 4 "
        "guesses): how much higher is a diamond than a dot, and how many tokens did each emit? The Speculation "
        "tab shows the same run beside the roofline's prediction.",
        _runs_speculation, speculation.speculation),
]
