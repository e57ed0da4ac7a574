"""`plan`'s inputs as text (the CLI's flags, the window's Plan form, both an argparse Namespace)
checked into a Problem and a SearchSpace, with the same one-line refusals for both."""
from __future__ import annotations

from backend.errors import InputError

DEFAULT_GPUS = "h100-sxm,h200-sxm,a100-80gb-sxm,b200"


def _names(text: str, flag: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names:
        raise InputError(f"{flag}: give at least one name")
    return names


def _ints(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in _names(text, flag))
    except ValueError:
        raise InputError(f"{flag}: expected whole numbers separated by commas, got {text!r}") from None
    if any(v < 1 for v in values):
        raise InputError(f"{flag}: every value must be at least 1, got {text!r}")
    return values


def problem_and_space(args):
    from backend.planner.candidates import POLICIES, PRECISION_ORDER, SearchSpace
    from backend.planner.evaluate import Problem
    from backend.workload.spec import LengthDist
    from backend.sim.engines import DEFAULT_ENGINE
    for flag, value in (("--slo-ttft-ms", args.slo_ttft_ms), ("--slo-tpot-ms", args.slo_tpot_ms)):
        if not value > 0:
            raise InputError(f"{flag} must be a positive number of milliseconds, got {value:g}")
    if args.trace is None and args.rate is None:
        raise InputError("give --rate R (Poisson arrivals per second) or --trace FILE")
    if args.rate is not None and not args.rate > 0:
        raise InputError(f"--rate must be a positive number of requests per second, got {args.rate:g}")
    precisions = _names(args.precisions, "--precisions")
    policies = _names(args.policies, "--policies")
    kv_dtypes = _names(args.kv_dtypes, "--kv-dtypes")
    for flag, names, known in (("--precisions", precisions, PRECISION_ORDER), ("--policies", policies, POLICIES),
                               ("--kv-dtypes", kv_dtypes, ("auto", "fp8"))):
        unknown = [n for n in names if n not in known]
        if unknown:
            raise InputError(f"{flag}: unknown {unknown[0]!r} (known: {', '.join(known)})")
    problem = Problem(model=args.model, slo_ttft_ms=args.slo_ttft_ms, slo_tpot_ms=args.slo_tpot_ms,
                      rate=args.rate if args.rate is not None else 1.0, num_requests=args.requests,
                      prompt_len=LengthDist.parse(args.prompt_len, "--prompt-len"),
                      output_len=LengthDist.parse(args.output_len, "--output-len"),
                      trace=args.trace, attainment=args.attainment, seed=args.seed,
                      confidence=getattr(args, "confidence", None),
                      engine=getattr(args, "engine", None) or DEFAULT_ENGINE.value)
    spec_tokens = _spec(args, problem)
    space = SearchSpace(gpus=_names(args.gpus, "--gpus"), max_gpus=args.max_gpus, precisions=precisions,
                        policies=policies, max_batches=_ints(args.max_batches, "--max-batches"), kv_dtypes=kv_dtypes,
                        spec_tokens=spec_tokens)
    return problem, space


def _spec(args, problem) -> tuple[int, ...]:
    """--spec-tokens as the K values searched (0: off), with --spec's proposer and pricing set on the problem;
    (0,) without --spec."""
    from backend.config import SpecConfig
    text = getattr(args, "spec", None)
    if text is None or text in ("", "off"):
        return (0,)
    raw = str(getattr(args, "spec_tokens", "4"))
    try:
        ks = tuple(sorted({int(v) for v in _names(raw, "--spec-tokens")}))
    except ValueError:
        raise InputError(f"--spec-tokens: expected whole numbers separated by commas (0: off), got {raw!r}") from None
    if any(k < 0 for k in ks):
        raise InputError(f"--spec-tokens: every value must be 0 (off) or more, got {raw!r}")
    spec = SpecConfig.parse(text, max(ks) or 1, acceptance=getattr(args, "spec_acceptance", None),
                            draft_cost=getattr(args, "spec_draft_cost", None), spec_from=getattr(args, "spec_from", "") or "")
    problem.spec_method, problem.spec_draft_model = spec.method, spec.draft_model
    problem.spec_acceptance, problem.spec_draft_cost, problem.spec_from = spec.acceptance, spec.draft_cost, spec.spec_from
    if spec.spec_from:   # read once here (a bad folder is one line before anything is simulated), then given
        from backend.sim.spec import sim_spec_of
        measured = sim_spec_of(spec, problem.seed)
        problem.spec_acceptance, problem.spec_draft_cost = measured.alpha, measured.draft_cost
        problem.spec_from = ""
    return ks
