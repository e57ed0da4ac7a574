"""Workload files, flags, arrival processes and length distributions."""
from __future__ import annotations

import heapq
import random
import statistics
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backend.errors import InputError
from backend.workload.prompts import PROMPTS
from backend.workload.arrivals import WorkloadSource
from backend.workload.spec import (ARRIVALS, KEYS, LengthDist, WorkloadSpec, apply_overrides,
                              list_workloads, load_workload, validate_workload, workload_from_dict)

PRESETS = {"poisson-chat", "long-prompts-during-decode", "burst-64", "closed-loop-8", "mixed-lengths"}


def fake_tokenize(text: str) -> list[int]:
    return [len(word) for word in text.split()]


def spec(**fields) -> WorkloadSpec:
    return validate_workload(WorkloadSpec(name="test", **fields))


def drain(source: WorkloadSource) -> list:
    return source.due(float("inf"))


def test_presets_load_and_describe_themselves():
    assert PRESETS <= set(list_workloads())
    for name in PRESETS:
        loaded = load_workload(name)
        assert loaded.name == name and loaded.description
    assert load_workload("burst-64").num_requests == 64
    assert load_workload("closed-loop-8").concurrency == 8


def test_unknown_name_and_missing_file():
    with pytest.raises(InputError, match="unknown workload 'nope'.*poisson-chat"):
        load_workload("nope")
    with pytest.raises(InputError, match="not found"):
        load_workload("missing/dir/w.toml")


MALFORMED = [
    ("arrival = \n", "not valid TOML"),
    ('arrival = "poisson"\nrate = 2.0\nprompt_len = 8\noutput_len = 8\n', "field 'num_requests': missing"),
    ('arrival = "poisson"\nrate = "fast"\nnum_requests = 4\nprompt_len = 8\noutput_len = 8\n',
     "field 'rate': expected a number"),
    ('arrival = "poisson"\nrate = 0\nnum_requests = 4\nprompt_len = 8\noutput_len = 8\n',
     "field 'rate': must be a number greater than 0"),
    ('arrival = "burst"\nnum_requests = -3\nprompt_len = 8\noutput_len = 8\n', "field 'num_requests': must be at least 1"),
    ('arrival = "burst"\nnum_requests = 3\nprompt_len = 8\noutput_len = 8\nrtae = 1\n', "field 'rtae': unknown key"),
    ('arrival = "burst"\nnum_requests = 3\nprompt_len = "512:128"\noutput_len = 8\n', "field 'prompt_len': min 512 > max 128"),
    ('arrival = "sometimes"\nnum_requests = 3\nprompt_len = 8\noutput_len = 8\n', "field 'arrival': expected one of"),
    ('arrival = "burst"\nnum_requests = 3\nprompt_len = 8\noutput_len = {kind = "normal", mean = 5}\n',
     "field 'output_len.std': missing"),
    ('arrival = "closed"\nnum_requests = 3\nprompt_len = 8\noutput_len = 8\n', "field 'concurrency': missing"),
    ('arrival = "burst"\nnum_requests = 2.5\nprompt_len = 8\noutput_len = 8\n', "field 'num_requests': expected a whole"),
]


@pytest.mark.parametrize("text, message", MALFORMED)
def test_malformed_files_name_the_file_and_field(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_workload(str(path))
    assert str(path) in str(err.value) and message in str(err.value)
    assert "\n" not in str(err.value)


def test_overrides_name_the_flag_and_swap_count_for_duration():
    base = load_workload("poisson-chat")
    with pytest.raises(InputError, match="^--rate: must be a number greater than 0"):
        apply_overrides(base, rate=0)
    with pytest.raises(InputError, match="^--prompt-len: min 9 > max 3"):
        apply_overrides(base, prompt_len="9:3")
    timed = apply_overrides(base, duration_s=10.0, output_len="4:6", prompt_len=LengthDist("fixed", 7))
    assert timed.num_requests is None and timed.duration_s == 10.0
    assert timed.output_len == LengthDist("uniform", low=4, high=6) and timed.prompt_len.value == 7
    assert apply_overrides(timed, num_requests=5).duration_s is None
    with pytest.raises(InputError, match="concurrency"):
        apply_overrides(base, arrival="closed")
    assert base.rate == 2.0      # the preset itself is untouched


def test_length_parsing_and_sampling():
    assert LengthDist.parse("128") == LengthDist("fixed", 128)
    assert LengthDist.parse("12:34") == LengthDist("uniform", low=12, high=34)
    for bad in ("abc", "1:2:3", "0", "", "-5"):
        with pytest.raises(InputError, match="--output-len"):
            LengthDist.parse(bad, "--output-len")
    normal = LengthDist.parse({"kind": "normal", "mean": 100, "std": 80, "low": 50, "high": 120})
    rng = random.Random(0)
    draws = [normal.sample(rng) for _ in range(2000)]
    assert min(draws) == 50 and max(draws) == 120     # clipped, and the clipping is reached
    uniform = LengthDist.parse("3:5")
    assert {uniform.sample(rng) for _ in range(200)} == {3, 4, 5}


def test_same_seed_same_workload_and_a_new_seed_changes_it():
    s = load_workload("mixed-lengths")
    a, b = drain(WorkloadSource(s, None, 500)), drain(WorkloadSource(s, None, 500))
    assert [(r.arrival_ms, r.prompt_ids, r.max_new_tokens) for r in a] == \
           [(r.arrival_ms, r.prompt_ids, r.max_new_tokens) for r in b]
    c = drain(WorkloadSource(apply_overrides(s, seed=1), None, 500))
    assert [r.arrival_ms for r in a] != [r.arrival_ms for r in c]
    assert all(0 <= t < 500 for r in a for t in r.prompt_ids)


def gaps(source: WorkloadSource) -> list[float]:
    times = [r.arrival_ms for r in drain(source)]
    return [b - a for a, b in zip(times, times[1:])]


def test_arrival_processes_keep_their_mean_rate_and_spread():
    n = 20_000
    poisson = gaps(WorkloadSource(spec(num_requests=n, arrival="poisson", rate=5.0), None, 100))
    assert statistics.mean(poisson) == pytest.approx(200.0, rel=0.03)
    assert statistics.stdev(poisson) / statistics.mean(poisson) == pytest.approx(1.0, rel=0.05)
    bursty = gaps(WorkloadSource(spec(num_requests=n, arrival="gamma", rate=5.0, burstiness=0.25), None, 100))
    assert statistics.mean(bursty) == pytest.approx(200.0, rel=0.05)
    assert statistics.stdev(bursty) / statistics.mean(bursty) == pytest.approx(2.0, rel=0.1)
    assert set(gaps(WorkloadSource(spec(num_requests=50, arrival="constant", rate=4.0), None, 100))) == {250.0}
    assert {r.arrival_ms for r in drain(WorkloadSource(spec(num_requests=9, arrival="burst"), None, 100))} == {0.0}


def test_duration_bounds_the_arrivals_and_due_releases_them_in_time():
    source = WorkloadSource(spec(num_requests=None, duration_s=20.0, arrival="poisson", rate=10.0), None, 100)
    assert 150 < source.num_total < 250
    first = source.due(1000.0)
    assert first and all(r.arrival_ms <= 1000.0 for r in first)
    assert source.next_arrival_ms() > 1000.0 and not source.is_exhausted()
    rest = drain(source)
    assert len(first) + len(rest) == source.num_total and max(r.arrival_ms for r in rest) < 20_000.0
    assert source.is_exhausted() and source.next_arrival_ms() is None


def run_closed_loop(source: WorkloadSource, seed: int = 0) -> tuple[int, int]:
    """A fake server answering each request after a random time; returns (sent, most in flight)."""
    rng, now, busy, sent, most = random.Random(seed), 0.0, [], 0, 0
    while not source.is_exhausted() or busy:
        for _ in source.due(now):
            heapq.heappush(busy, now + rng.uniform(10.0, 500.0))
            sent += 1
        most = max(most, len(busy))
        now = heapq.heappop(busy)
        source.on_finish(now)
        assert source.next_arrival_ms() in (None, now)    # a user sends the next one at once
    return sent, most


def test_closed_loop_never_exceeds_its_users():
    lockstep = apply_overrides(load_workload("closed-loop-8"), ramp_ms=0.0)
    sent, most = run_closed_loop(WorkloadSource(lockstep, fake_tokenize, 100))
    assert sent == 48 and most == 8
    timed = spec(num_requests=None, duration_s=3.0, arrival="closed", concurrency=3, ramp_ms=0.0)
    sent, most = run_closed_loop(WorkloadSource(timed, None, 100))
    assert most == 3 and 3 * 3000 / 500 <= sent <= 3 * 3000 / 10 + 3
    assert WorkloadSource(timed, None, 100).num_total is None


def test_text_prompts_are_real_text_fitted_to_the_drawn_length():
    s = spec(num_requests=40, arrival="burst", prompt_source="text", prompt_len=LengthDist("uniform", low=5, high=400),
             output_len=LengthDist("fixed", 3))
    reqs = drain(WorkloadSource(s, fake_tokenize, 100))
    lengths = {len(r.prompt_ids) for r in reqs}
    assert min(lengths) >= 5 and max(lengths) > 200          # longer than any one prompt: extended
    for r in reqs:
        assert any(r.prompt_text.startswith(p) for p in PROMPTS) and r.max_new_tokens == 3
        assert r.prompt_ids == fake_tokenize(r.prompt_text)[:len(r.prompt_ids)]
    clipped = drain(WorkloadSource(s, fake_tokenize, 100, max_prompt_len=50))
    assert max(len(r.prompt_ids) for r in clipped) == 50
    with pytest.raises(InputError, match="tokenizer"):
        WorkloadSource(s, None, 100)


def test_shipped_prompts_are_varied():
    assert len(PROMPTS) >= 30 and len(set(PROMPTS)) == len(PROMPTS)
    assert max(len(p) for p in PROMPTS) > 10 * min(len(p) for p in PROMPTS)


scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**7), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from(list(ARRIVALS) + ["synthetic", "text", "8:64", "64:8"]))
lengths = st.one_of(scalars, st.dictionaries(st.sampled_from(["kind", "value", "low", "high", "mean", "std", "x"]),
                                             st.one_of(scalars, st.sampled_from(["fixed", "uniform", "normal"]))))
# A valid preset with a few fields replaced, removed or added, so both outcomes are common.
workload_dicts = st.builds(
    lambda base, changes, removed: {k: v for k, v in {**base, **changes}.items() if k not in removed},
    st.sampled_from(sorted(PRESETS)).map(lambda name: load_workload(name).to_dict()),
    st.dictionaries(st.sampled_from(list(KEYS) + ["extra"]), st.one_of(scalars, lengths), max_size=3),
    st.sets(st.sampled_from(KEYS), max_size=2))


def check_valid(s: WorkloadSpec) -> None:
    assert (s.num_requests is None) != (s.duration_s is None)
    assert s.arrival in ARRIVALS and s.burstiness > 0 and s.prompt_source in ("synthetic", "text")
    if s.arrival in ("constant", "poisson", "gamma"):
        assert s.rate > 0
    if s.arrival == "closed":
        assert s.concurrency >= 1
    for dist in (s.prompt_len, s.output_len):
        assert (dist.value >= 1) if dist.kind == "fixed" else (1 <= dist.low <= dist.high)
    assert validate_workload(s) == s


@settings(max_examples=300, deadline=None)
@given(data=workload_dicts)
def test_any_workload_dict_is_accepted_valid_or_refused_with_input_error(data):
    try:
        s = workload_from_dict(data, "gen", "gen.toml")
    except InputError as err:
        assert str(err).startswith("gen.toml: field '") and "\n" not in str(err)
        return
    check_valid(s)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=200))
def test_any_file_text_is_accepted_valid_or_refused_with_input_error(text):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "gen.toml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            s = load_workload(str(path))
        except InputError as err:
            assert str(path) in str(err)
            return
        check_valid(s)
