"""Writes the synthetic test traces here (run once; the outputs are committed, this records how).

Lengths are drawn to look like the published traces' summaries, not copied from them: Azure's
2023 conversation trace (prompts around 1,000 tokens, answers around 100-200, a few requests a
second) and Mooncake's conversation trace (prompts of several thousand tokens sharing 512-token
prefix blocks, answers of a few hundred).
"""
import json
import random
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent


def lognormal(rng, median, sigma, low, high):
    return int(min(high, max(low, round(rng.lognormvariate(0.0, sigma) * median))))


def azure(path: Path, rows: int, seed: int) -> None:
    rng = random.Random(seed)
    t = datetime(2023, 11, 16, 18, 15, 46, 680590)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for _ in range(rows):
        # Azure writes 7 fraction digits (100 ns ticks)
        lines.append(f"{t:%Y-%m-%d %H:%M:%S}.{t.microsecond:06d}{rng.randrange(10)},"
                     f"{lognormal(rng, 1000, 0.9, 12, 7000)},{lognormal(rng, 130, 0.8, 2, 700)}")
        t += timedelta(seconds=rng.expovariate(4.0))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def mooncake(path: Path, rows: int, seed: int) -> None:
    rng = random.Random(seed)
    t, next_block, prefixes, lines = 0, 0, [], []
    for _ in range(rows):
        n_in = lognormal(rng, 4000, 0.7, 200, 30000)
        blocks = -(-n_in // 512)
        shared = list(rng.choice(prefixes))[:blocks] if prefixes and rng.random() < 0.5 else []
        own = list(range(next_block, next_block + blocks - len(shared)))
        next_block += len(own)
        hashes = shared + own
        prefixes.append(hashes)
        lines.append(json.dumps({"timestamp": t, "input_length": n_in,
                                 "output_length": lognormal(rng, 180, 0.7, 4, 1500), "hash_ids": hashes}))
        t += int(rng.expovariate(1 / 250.0))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    azure(HERE / "azure-conv-50.csv", 50, 1)
    mooncake(HERE / "mooncake-50.jsonl", 50, 2)
    azure(HERE.parents[2] / "profiles" / "workloads" / "traces" / "azure-conv-200.csv", 200, 3)
