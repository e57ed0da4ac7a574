"""A Mooncake-format trace of any length, for the replay benchmark (bench/kv_cache.py mooncake).

    python -m bench.make_mooncake OUT.jsonl [--rows 1000] [--seed 7]

Each line is {"timestamp" (ms), "input_length", "output_length", "hash_ids"}, one hash id per
512-token block as in Mooncake's published traces. Synthetic (seeded), shaped as the published
conversation trace is described: a few long system prompts shared by many requests, conversations
whose next turn resends the previous turn's blocks and adds its own, and one-off documents. The
shipped 50-row sample (tests/data/traces/make_traces.py) shares whole earlier prompts at random;
this one adds the conversation structure, so the hit rate depends on the cache's size and order.
"""
from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path

BLOCK = 512


def lognormal(rng: random.Random, median: float, sigma: float, low: int, high: int) -> int:
    return max(low, min(high, int(median * math.exp(rng.gauss(0.0, sigma)))))


def rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    next_id = 0

    def fresh(count: int) -> list[int]:
        nonlocal next_id
        next_id += count
        return list(range(next_id - count, next_id))

    systems = [fresh(rng.randint(2, 6)) for _ in range(4)]   # system prompts of 1-3k tokens
    live: list[list[int]] = []   # conversations that may come back
    t, out = 0, []
    for _ in range(n):
        r = rng.random()
        if live and r < 0.45:   # a conversation's next turn: its blocks so far and one or two more
            i = rng.randrange(len(live))
            hashes = live[i] + fresh(rng.randint(1, 2))
            if len(hashes) < 40:
                live[i] = hashes
            else:              # a conversation this long ends
                live.pop(i)
        elif r < 0.8:           # a new conversation on one of the system prompts
            hashes = rng.choice(systems) + fresh(rng.randint(1, 4))
            live.append(hashes)
            if len(live) > 64:
                live.pop(0)
        else:                   # a one-off document
            hashes = fresh(lognormal(rng, 8, 0.6, 1, 40))
        n_in = len(hashes) * BLOCK - rng.randrange(BLOCK)   # the last block partly filled
        out.append({"timestamp": t, "input_length": n_in, "output_length": lognormal(rng, 180, 0.7, 4, 1500),
                    "hash_ids": hashes})
        t += int(rng.expovariate(1 / 250.0))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    args.out.write_text("".join(json.dumps(row) + "\n" for row in rows(args.rows, args.seed)), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
