"""A remote run's conversations: each turn sends what the turn before it sent, then the answer the
server gave, then the new message, so a server's prefix cache sees every earlier turn again, as
in a real chat.

The workload source (backend/workload/arrivals.py) decides when each turn arrives and draws its new
message; what was sent and answered lives here, in the coordinator, because only it has the text the
server saw and the text the server answered. A text prompt (completions or chat) is the earlier
text, the answer appended as the server wrote it (a completion continues its prompt), a blank line
and the new message. A token-id prompt appends the answer's ids by the served model's tokenizer
(--tokenizer, or the bundled one for SmolLM2); without one, stand-in ids of the answer's length
(the prefix the server sees then still repeats exactly, though its answer's own ids differ).
"""
from __future__ import annotations

import random
from dataclasses import replace

from backend.targets.remote.prompts import SEPARATOR, SYNTHETIC_FIRST_ID, SYNTHETIC_VOCAB, Prompt, PromptBuilder


class Turns:
    """What each conversation has sent and been answered, until its next turn is built."""

    def __init__(self, builder: PromptBuilder, turns: int):
        self.builder = builder
        self.turns = turns
        self._sent: dict[int, tuple[int, str | list[int]]] = {}    # request id -> (conversation, content sent)
        self._history: dict[int, str | list[int]] = {}             # conversation -> content sent + its answer

    def prompt(self, spec, synthetic: bool) -> Prompt:
        """The turn's prompt, its content exactly as it is sent (token ids already in the sent range)."""
        if spec.turn == 0 or spec.conversation_id not in self._history:
            first = self.builder.build(spec)
            prompt = first if not synthetic else Prompt(_sent_ids(first.content), first.num_tokens, first.source)
        else:
            history = self._history.pop(spec.conversation_id)
            tail = replace(spec, prompt_ids=spec.prompt_ids[spec.history_len:], prompt_text=spec.message_text)
            message = self.builder.build(tail)
            if synthetic:
                content = list(history) + _sent_ids(message.content)
                prompt = Prompt(content, len(content), message.source)
            else:
                text = history + SEPARATOR + message.content
                count = self.builder.count(text) if self.builder.tokenizer is not None else \
                    len(self.builder.pieces.encode(text)) - 1
                prompt = Prompt(text, count, message.source)
        if spec.turn + 1 < self.turns:
            self._sent[spec.request_id] = (spec.conversation_id, prompt.content)
        return prompt

    def answered(self, request_id: int, text: str, num_tokens: int) -> None:
        """The request left with this answer (empty when it failed): the conversation's next turn extends it."""
        entry = self._sent.pop(request_id, None)
        if entry is None:
            return
        conversation, content = entry
        if isinstance(content, str):
            self._history[conversation] = content + text
            return
        ids = self.builder.answer_ids(text)
        if ids is None:   # no tokenizer: stand-in ids of the answer's length, the same for the same request
            rng = random.Random(f"answer:{request_id}")
            ids = [rng.randrange(SYNTHETIC_FIRST_ID, SYNTHETIC_VOCAB) for _ in range(num_tokens)]
        self._history[conversation] = list(content) + ids


def _sent_ids(ids: list[int]) -> list[int]:
    """Workload ids in [0, SYNTHETIC_VOCAB - SYNTHETIC_FIRST_ID) moved clear of the special tokens."""
    return [SYNTHETIC_FIRST_ID + i for i in ids]
