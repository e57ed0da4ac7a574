"""Record llama.cpp's streamed answers as they arrive: each read's time and the SSE events in it.

    python tests/data/streams/record_llama_cpp.py [OUT.json]

Starts llama-cpp-python's OpenAI-compatible server on the bundled SmolLM2 GGUF (tests/fakes/llama_server.py,
one thread), sends each request of REQUESTS one after another (greedy, so the answers repeat) and writes, per
request, its body and every event with the ms since the request was sent, at the read it came in. The model's
absolute path in the events is replaced by its file name. tests/targets/test_recorded_streams.py replays the
file through the client's parser and checks every definition of backend/results/definitions.py against values
worked out from these times.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from tests.fakes.llama_server import GGUF_NAME, llama_server  # noqa: E402

OUT = Path(__file__).with_name("llama_cpp_smollm2.json")
GREEDY = {"temperature": 0.0, "seed": 0, "stream": True, "stream_options": {"include_usage": True}}
REQUESTS = [
    # a chat stream: it opens with a role-only delta, then one token a chunk
    ("chat", {"messages": [{"role": "user", "content": "Name three colors."}], "max_tokens": 12}),
    # an answer in emoji: llama.cpp holds back a token that ends inside a UTF-8 character, so a chunk carries
    # every token of its character (the bundled tokenizer counts them 3, 2 and 3)
    ("completions", {"prompt": "Emoji: \U0001F600", "max_tokens": 12}),
    ("chat", {"messages": [{"role": "user", "content": "Write the word café and three emoji."}], "max_tokens": 16}),
]


def record(url: str, api: str, body: dict) -> dict:
    events, buf = [], b""
    with httpx.Client(timeout=120.0) as client:
        sent = time.perf_counter()
        with client.stream("POST", f"{url}/{'chat/completions' if api == 'chat' else 'completions'}",
                           json={**GREEDY, **body, "model": GGUF_NAME}) as response:
            for data in response.iter_raw():
                at = round((time.perf_counter() - sent) * 1000.0, 3)
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    line = line.strip()
                    if line.startswith(b"data:"):
                        events.append([at, line[5:].strip().decode()])
    return {"api": api, "body": body, "events": events}


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    import llama_cpp
    with llama_server() as server:
        record(server.url, "completions", {"prompt": "Hello", "max_tokens": 2})   # warm: the first answer loads
        requests = [record(server.url, api, body) for api, body in REQUESTS]
    for r in requests:   # the model's absolute path: its file name
        for event in r["events"]:
            if event[1] != "[DONE]":
                payload = json.loads(event[1])
                payload["model"] = GGUF_NAME
                event[1] = json.dumps(payload, ensure_ascii=False)
    out.write_text(json.dumps({"server": f"llama-cpp-python {llama_cpp.__version__}", "model": GGUF_NAME,
                               "threads": 1, "made_by": "tests/data/streams/record_llama_cpp.py",
                               "requests": requests}, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {out}: {sum(len(r['events']) for r in requests)} events in {len(requests)} requests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
