"""One engine process of the disaggregated policy: a prefill worker or a decode worker.

Started by the coordinator (backend/targets/disaggregated/coordinator.py) as a fresh interpreter, as the
window's engine process is (never a fork). It pins itself to its cores, loads the model, warms
up, says it is ready, and then runs its loop on the coordinator's clock until told to stop:

- prefill: requests come from the coordinator; the real chunked scheduler runs the prompt of
  each, but its last token, in chunks of --chunk-tokens (prefill-only steps), over a paged cache
  with prefix caching (the default): a prompt starting with blocks computed before prefills only the
  rest. When a prompt's KV is complete, all of it (the cached blocks too) is packed and handed to
  the decode worker the coordinator named (backend/engine/kv_transfer.py), and then its blocks and
  slot are given back (the full blocks stay cached).
- decode: hand-offs come from the prefill workers' links; each is copied into the blocks of a free
  slot (paged: the blocks its batch gives the request) and joins the continuous decode batch
  (backend/engine/decode_batch.py), whose first step for it takes the last prompt token and
  samples the first output token. It never runs a prefill.

Wire (backend.protocol: its WORKER channel on one socket to the coordinator; its KV channel on one
socket per prefill-decode pair):

    coordinator -> worker   Init (first) | Start | Dispatch | Cancel | Stop
    worker -> coordinator   Ready | WorkerRecords | Failed | Done
    prefill -> decode       KVHandoff [+ the bytes as one raw frame, under pipe]
    decode -> prefill       Freed
"""
from __future__ import annotations

from multiprocessing.connection import Connection

from backend.launcher import child_started
from backend.protocol import Channel, Failed, Init, Port, ProtocolError, Side
from backend.targets.disaggregated.decode_worker import DecodeWorker
from backend.targets.disaggregated.prefill_worker import PrefillWorker

__all__ = ["serve_fd"]


def serve_fd(fd: str) -> None:
    """The child's entry point (backend.launcher): the file descriptor of its end of the coordinator's socket."""
    child_started()
    conn = Port(Connection(int(fd)), Channel.WORKER, Side.WORKER)
    try:
        first = conn.recv()
    except (EOFError, OSError):
        return
    if not isinstance(first, Init):
        raise ProtocolError(f"a worker's first message must be 'init', not '{first.op.value}'")
    spec = first.spec
    try:
        worker = (PrefillWorker if spec.role == "prefill" else DecodeWorker)(conn, spec)
    except Exception as exc:   # noqa: BLE001 -- one line to the coordinator, which ends the run
        from backend.errors import one_line
        conn.send(Failed(one_line(exc, typed=True)))
        return
    try:
        worker.serve()
    except (EOFError, OSError):
        return   # the coordinator is gone
    except Exception as exc:   # noqa: BLE001 -- one line to the coordinator, which fails this worker's requests
        from backend.errors import one_line
        try:
            conn.send(Failed(one_line(exc, typed=True)))
        except OSError:
            pass
    finally:
        worker.close()

