"""`profiles`, `calibrate` and `sweep`: the roofline side of the command line."""
from __future__ import annotations

import sys

from backend.config import RunConfig, SweepKind
from backend.run_info import RemoteInfo, RunInfo
from backend.summary import Crossovers, Summary


def add_tool_parsers(sub, model_flags) -> None:
    sub.add_parser("profiles", help="list GPU profiles with their ridge points (FLOP/byte) per dtype")

    cal = sub.add_parser("calibrate", help="measure this machine's matmul FLOP/s and memory bandwidth")
    cal.add_argument("--device", default="auto")
    cal.add_argument("--out", help="profile TOML to write (default: this-machine.toml in the config folder)")
    cal.add_argument("--quick", action="store_true", help="smaller, faster measurements")
    cal.add_argument("--fit", nargs="*", metavar="RUN_DIR", default=None,
                     help="fit the simulator's cost model (efficiencies, overheads) to these measured runs' steps "
                          "and store it in the profile; e.g. a batch sweep, a prompt sweep and a load run. With no "
                          "RUN_DIR: measure those three of the bundled model first (into --runs)")
    cal.add_argument("--runs", metavar="DIR", help="with a bare --fit: where the measured runs go "
                     "(default: calibration-runs)")
    cal.add_argument("--check", nargs="+", metavar="RUN_DIR", default=[],
                     help="with --fit: report the error on these runs (default: each --fit run left out in turn)")
    cal.add_argument("--from", dest="from_runs", nargs="+", metavar="RUN_DIR", default=None,
                     help="fit a server's own profile on remote runs against it (`load --endpoint`, at several "
                          "loads or lengths; at least 3): host costs and efficiencies on --profile's device, with "
                          "the fit's own band (each run left out in turn)")
    cal.add_argument("--profile", help="with --from: the device the server runs on (see `profiles`)")
    cal.add_argument("--model", help="with --from: the served model's shape (a known name or a config.json; "
                     "default: the served model's name)")
    cal.add_argument("--dtype", default="auto", help="with --from: the precision the server runs the model at")
    cal.add_argument("--max-batch", type=int, default=1, help="with --from: requests the server runs at once "
                     "(llama.cpp's Python server: 1; vLLM: its max_num_seqs)")
    from backend.cli.flags import simulate_flag, threads_flag
    threads_flag(cal)

    sweep = sub.add_parser("sweep", help="batch-size or prompt-length sweep against the roofline")
    kinds = sweep.add_subparsers(dest="kind", required=True)
    b = kinds.add_parser(SweepKind.BATCH, help="decode step time and tokens/s by batch size at a fixed context")
    model_flags(b)
    simulate_flag(b)
    b.add_argument("--batches", default="1,2,4,8,16,32,64")
    b.add_argument("--context", type=int, default=512, help="tokens each request attends to")
    b.add_argument("--steps", type=int, default=8, help="timed steps per batch size (median reported)")
    p = kinds.add_parser(SweepKind.PROMPT, help="TTFT and prefill tokens/s by prompt length")
    model_flags(p)
    simulate_flag(p)
    p.add_argument("--lengths", default="32,64,128,256,512,1024,2048")
    p.add_argument("--steps", type=int, default=3, help="timed prefills per length (median reported)")
    q = kinds.add_parser(SweepKind.PRECISION, help="TTFT and TPOT of the same model at each weight precision")
    model_flags(q)
    simulate_flag(q)
    q.add_argument("--dtypes", default="float32,bfloat16,q8_0,q4_1",
                   help="comma-separated precisions: float32, bfloat16, float16, q8_0, q4_0, q4_1, q5_0, q5_1, "
                        "q4_k, q5_k, q6_k, f16, bf16w, int8 (not on CUDA)")
    q.add_argument("--prompt-len", type=int, default=512, help="tokens in each prompt")
    q.add_argument("--output-len", type=int, default=64, help="decode steps timed (median reported as TPOT)")
    q.add_argument("--batch", type=int, default=1, help="requests prefilled and decoded together")
    q.add_argument("--steps", type=int, default=3, help="timed prefills per precision (median reported as TTFT)")
    from backend.cli.load import load_flags
    r = kinds.add_parser(SweepKind.RATE, help="the same workload at each arrival rate: throughput per device against per "
                         "user, the Pareto front and the goodput under the SLOs (real, simulated or remote)")
    load_flags(r, model_flags)
    r.add_argument("--rates", default="1,2,4,8", help="comma-separated arrivals per second (Poisson unless --arrival gamma)")
    c = kinds.add_parser(SweepKind.CONCURRENCY, help="the same workload at each number of closed-loop users: as `sweep rate`")
    load_flags(c, model_flags)
    c.add_argument("--concurrencies", default="1,2,4,8,16", help="comma-separated numbers of users")
    from backend.cli.pd_ratio import add_pd_ratio_parser
    add_pd_ratio_parser(kinds, model_flags)
    from backend.cli.depth import add_depth_parser
    add_depth_parser(kinds, model_flags)


def print_profiles() -> int:
    from backend.roofline.profiles import list_profiles
    from backend.cli.report import print_table
    rows = [("name", "device", "memory", "bandwidth", "bf16", "fp16", "fp32", "ridge bf16", "ridge fp16", "ridge fp32")]
    for p in list_profiles():
        def tf(k):
            return f"{p.tflops[k]:,.1f} TF" if k in p.tflops else "-"

        def ridge(k):
            return f"{p.ridge(k):,.0f}" if k in p.tflops else "-"
        label = p.name + (" (measured)" if p.measured else "")
        rows.append((p.key, label, f"{p.memory_gb:g} GB", f"{p.bandwidth_gbs:,.0f} GB/s", tf("bf16"), tf("fp16"),
                     tf("fp32"), ridge("bf16"), ridge("fp16"), ridge("fp32")))
    print_table(rows)
    print("\nridge = peak FLOP/s / bandwidth, in FLOP/byte: a step with fewer FLOPs per byte moved is memory-bound.")
    return 0


def run_calibrate(args) -> int:
    if args.from_runs is not None:
        from backend.cli.fit_from import run_fit_from
        return run_fit_from(args)
    if args.check and args.fit is None:
        from backend.errors import InputError
        raise InputError("--check needs --fit [RUN_DIR ...]: the runs to fit on")
    if args.fit is not None:
        from backend.cli.fit import run_fit
        return run_fit(args)
    from backend.roofline.calibrate import calibrate, write_profile
    from backend.engine.threads import apply_threads

    def progress(message: str, fraction: float) -> None:
        print(f"... {message} ({fraction * 100:.0f}%)", file=sys.stderr)
    apply_threads(args.threads)
    profile = calibrate(args.device, progress, quick=args.quick)
    fitted = _fitted_terms(args.out)
    path = write_profile(profile, args.out)
    print(f"{profile.name}: {profile.bandwidth_gbs:,.1f} GB/s, "
          + ", ".join(f"{k} {v:,.2f} TFLOP/s" for k, v in profile.tflops.items())
          + ("" if not profile.bf16_unit else " (bf16 widened to fp32: no bf16 unit)" if profile.bf16_unit == "none"
             else f" (bf16 on {profile.bf16_unit})"))
    if profile.kernels_tflops:
        rates = ", ".join(f"{k} {v:,.2f} TFLOP/s" for k, v in profile.kernels_tflops.items())
        print(f"the C kernels' products: {rates}")
    print(f"written to {path}; it now appears in `profiles` as {profile.key}")
    if fitted:
        print("the simulator's fitted terms were priced on the old peaks and are dropped: "
              "run `calibrate --fit RUN_DIR ...` again on fresh runs")
    return 0


def _fitted_terms(out) -> bool:
    """Whether the profile about to be replaced held fitted [simulation] terms."""
    from backend.errors import InputError
    from backend.roofline.profiles import load_profile, local_profile_path
    from pathlib import Path
    path = Path(out) if out else local_profile_path()
    try:
        return path.is_file() and bool(load_profile(path).simulation)
    except InputError:
        return False


def sweep_config(args) -> RunConfig:
    from backend.cli.flags import common_config
    from backend.sweeps.parse import parse_sizes
    from backend.sweeps.parse import parse_rates
    from backend.config import SweepSpec
    from backend.errors import InputError
    kind = SweepKind(args.kind)
    if kind is SweepKind.DEPTH:
        from backend.cli.depth import depth_config
        return depth_config(args)
    if kind in (SweepKind.RATE, SweepKind.CONCURRENCY, SweepKind.PD_RATIO):
        from backend.cli.load import load_config
        config = load_config(args)
        config.mode = kind.run_kind
        if kind is SweepKind.PD_RATIO:
            if config.endpoint is not None:
                raise InputError("sweep pd-ratio is simulated: it cannot be combined with --endpoint")
            config.simulate = True
            config.sweep = SweepSpec(kind, total_devices=args.total_devices)
        else:
            config.sweep = (SweepSpec(kind, rates=parse_rates(args.rates)) if kind is SweepKind.RATE else
                            SweepSpec(kind, concurrencies=parse_sizes(args.concurrencies, "--concurrencies")))
        return config
    config = common_config(args, kind.run_kind)
    if args.steps <= 0:
        raise InputError(f"--steps must be positive, got {args.steps}")
    if kind is SweepKind.PRECISION:
        from backend.sweeps.parse import parse_dtypes
        for flag, value in (("--prompt-len", args.prompt_len), ("--output-len", args.output_len), ("--batch", args.batch)):
            if value <= 0:
                raise InputError(f"{flag} must be positive, got {value}")
        config.sweep = SweepSpec(kind, steps=args.steps, dtypes=parse_dtypes(args.dtypes),
                                 prompt_len=args.prompt_len, output_len=args.output_len, batch=args.batch)
    elif kind is SweepKind.BATCH:
        if args.context <= 0:
            raise InputError(f"--context must be positive, got {args.context}")
        config.sweep = SweepSpec(kind, batches=parse_sizes(args.batches, "--batches"), context=args.context,
                                 steps=args.steps)
    else:
        config.sweep = SweepSpec(kind, lengths=parse_sizes(args.lengths, "--lengths"), steps=args.steps)
    return config


def _finish_load_summary(s: Summary, info: RunInfo, config) -> None:
    unit = "arrivals/s" if s.kind == "rate" else "users"
    remote = info.remote or RemoteInfo()
    target = info.device or remote.endpoint or "?"
    print(f"\nmodel {info.model or remote.served_model} on {target}" + (" (SIMULATED)" if info.is_simulated else ""))
    if s.pareto:
        print(f"Pareto front (no point better on both throughput per device and per user): {s.pareto} {unit}")
    if s.best_goodput_at is not None:
        print(f"best goodput: {s.best_goodput_requests_per_s:.2f} req/s within the SLOs at {s.best_goodput_at:g} {unit}")
    elif config.slo_ttft_ms is None and config.slo_tpot_ms is None:
        print("no goodput: give --slo-ttft-ms and/or --slo-tpot-ms")
    if s.note:
        print(s.note)
    if config.out_dir:
        print(f"written to {config.out_dir}/sweep.csv, each point's records in its own folder")


def _change(speedup: float) -> str:
    """A time's ratio to the first point's, in words: '2.58x shorter', '1.56x longer'."""
    return f"{speedup:.2f}x shorter" if speedup >= 1 else f"{1 / speedup:.2f}x longer"


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _experts_line(info: RunInfo, points: list) -> str | None:
    """A mixture of experts' batch sweep: the weights a decode step read at the smallest and the
    largest batch, the uniform routing's prediction beside them (None for a dense model)."""
    shape = info.shape or {}
    read = [p for p in points if p.weight_bytes]
    if not shape.get("num_experts") or len(read) < 2:
        return None
    lo, hi = read[0], read[-1]
    return (f"mixture of experts ({shape['experts_per_token']} of {shape['num_experts']} experts a token): a decode "
            f"step read {lo.weight_bytes / 1e6:,.0f} MB of weights at batch {lo.x} and {hi.weight_bytes / 1e6:,.0f} MB "
            f"at batch {hi.x} (predicted {lo.predicted_weight_bytes / 1e6:,.0f} and "
            f"{hi.predicted_weight_bytes / 1e6:,.0f} MB): more tokens touch more experts")


class SweepPrinter:
    """Prints each sweep point as it is measured, then the crossover summary."""

    def __init__(self, kind: SweepKind):
        self.kind = kind
        self.points: list = []
        if kind is SweepKind.PD_RATIO:   # a table at the end, with the best split marked
            self.printed = True
            return
        if kind is SweepKind.DEPTH:
            from backend.cli.depth import DEPTH_HEADER
            self.header, self.printed = DEPTH_HEADER, False
            return
        if kind in (SweepKind.RATE, SweepKind.CONCURRENCY):
            self.header = (f"{'rate/s' if kind is SweepKind.RATE else 'users':>7} {'done':>5} {'tok/s/device':>13} "
                           f"{'tok/s/user':>11} {'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p50':>9} {'TPOT p99':>9} "
                           f"{'goodput':>8}")
            self.printed = False
            return
        if kind is SweepKind.PRECISION:
            self.header = (f"{'dtype':>9} {'weights':>9} {'bits':>5} {'TTFT ms':>9} {'TPOT ms':>9} {'prefill tok/s':>14} "
                           f"{'decode tok/s':>13} {'pred TTFT':>10} {'pred TPOT':>10}")
            self.printed = False
            return
        # weights: what a step read (measured; an MoE's grow with the batch) and the roofline's count
        self.header = f"{'batch' if kind is SweepKind.BATCH else 'prompt':>7} {'step ms':>10} {'tokens/s':>11} {'MFU':>7} " \
                      f"{'MBU':>7} {'pred ms':>10} {'local ms':>10} {'weights':>9} {'pred':>9}  bound"
        self.printed = False

    def on_point(self, p) -> None:
        self.points.append(p)
        if self.kind is SweepKind.PD_RATIO:
            return
        if not self.printed:
            print(self.header)
            self.printed = True
        if self.kind is SweepKind.DEPTH:
            from backend.cli.depth import depth_row
            print(depth_row(p), flush=True)
            return
        if self.kind in (SweepKind.RATE, SweepKind.CONCURRENCY):
            print(f"{p.x:>7g} {p.num_finished:>5} {p.tokens_per_s_per_device:>13,.1f} {p.tokens_per_s_per_user:>11,.1f} "
                  f"{p.ttft_p50_ms:>9,.1f} {p.ttft_p99_ms:>9,.1f} {p.tpot_p50_ms:>9,.2f} {p.tpot_p99_ms:>9,.2f} "
                  f"{_fmt(None if p.goodput_requests_per_s != p.goodput_requests_per_s else p.goodput_requests_per_s, '>8.2f')}",
                  flush=True)
            return
        if self.kind is SweepKind.PRECISION:
            print(f"{p.dtype:>9} {p.weight_bytes / 1e6:>7,.0f}MB {p.weight_bits:>5.2f} {p.ttft_ms:>9.1f} {p.tpot_ms:>9.2f} "
                  f"{p.prefill_tokens_per_s:>14,.0f} {p.decode_tokens_per_s:>13,.1f} "
                  f"{_fmt(p.predicted_ttft_ms, '>10.1f')} {_fmt(p.predicted_tpot_ms, '>10.2f')}", flush=True)
            return
        mb = [None if v is None else f"{v / 1e6:,.1f}MB" for v in (p.weight_bytes, p.predicted_weight_bytes)]
        print(f"{p.x:>7} {p.step_ms:>10.2f} {p.tokens_per_s:>11,.1f} {_fmt(p.mfu, '>7.1%')} {_fmt(p.mbu, '>7.1%')} "
              f"{_fmt(p.predicted_ms, '>10.3f')} {_fmt(p.predicted_local_ms, '>10.3f')} {_fmt(mb[0], '>9')} "
              f"{_fmt(mb[1], '>9')}  {p.bound}", flush=True)

    def _print_experts(self, info: RunInfo) -> None:
        line = _experts_line(info, self.points)
        if line:
            print(line)

    def finish(self, finished, config) -> None:
        s, info = finished.summary, finished.data.info
        if self.kind is SweepKind.PD_RATIO:
            from backend.cli.pd_ratio import print_points
            for p in self.points:   # the points as emitted: mark the best the sweep chose
                p.best = p.split == s.best_split
            print_points(config, self.points, config.sweep.total_devices)
            if s.note:
                print(s.note)
            if config.out_dir:
                print(f"written to {config.out_dir}/sweep.csv (and run.json), each split's records in its own folder")
            return
        if self.kind in (SweepKind.RATE, SweepKind.CONCURRENCY):
            _finish_load_summary(s, info, config)
            return
        if self.kind is SweepKind.DEPTH:
            from backend.cli.depth import finish_depth
            finish_depth(finished, config)
            return
        local_profile = info.sweep.local_profile if info.sweep is not None else None
        print(f"\nmodel {info.model} on {info.device_name} ({info.dtype}); "
              f"profile {info.profile} (local: {local_profile})")
        from backend.results.matmul import products_text
        if products_text(info.host.matmul):
            print(f"products: {products_text(info.host.matmul)}")
        from backend.roofline.roofs import math_from_info
        math = math_from_info(info)
        if math is not None and math.bf16 and s.kind in ("batch", "prompt"):
            print(f"predictions on a CPU profile: its bf16 roof for products of {math.min_rows}+ rows ({math.unit}), "
                  f"its fp32 roof for fewer, as the run computed them")
        if s.simulated_mape is not None:
            print(f"simulated on {local_profile} beside the measured points: step-time error "
                  f"{s.simulated_mape:.1f}% on average, {s.simulated_worst:.1f}% at worst")
        if s.kind == "batch":
            def show(v):
                return "none (decode stays memory-bound)" if v is None else str(v)
            seen = "simulated" if info.is_simulated else "measured"
            crossover = s.crossover or Crossovers()
            print(f"crossover batch: {seen} {show(crossover.measured)}, predicted for the profile "
                  f"{show(crossover.predicted)}"
                  + (f", for this machine {show(crossover.predicted_local)}" if local_profile else ""))
            self._print_experts(info)
        if s.kind == "precision":
            for name, gain in s.precision.items():
                print(f"{name}: {gain.bytes_ratio:.2f}x fewer weight bytes than {(info.dtype or '').split(',')[0]}; "
                      f"TPOT {_change(gain.tpot_speedup)}, TTFT {_change(gain.ttft_speedup)}")
        if s.note:
            print(s.note)
        if config.out_dir:
            print(f"written to {config.out_dir}/sweep.csv (and run.json, steps.csv)")
