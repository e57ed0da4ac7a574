"""The prompts of workloads that reuse KV: a system prompt shared by every user, and conversations.

A shared prefix (spec.shared_prefix_len L) is one prompt of L tokens built once from the workload's
seed; every first turn starts with it (all of it, or its first n tokens when the drawn prompt length
n is shorter), so the first L tokens of every request are the same.

A conversation (spec.turns N > 1) is N requests: turn 0's prompt is drawn as any request's (after the
shared prefix); turn k > 0's prompt is turn k-1's prompt, then the answer turn k-1 actually got, then a
new message of turn_len tokens (a user's next message in a chat, a tool's result in an agent's loop).
So turn k's prompt starts with every earlier prompt and answer, token for token: what a prefix cache
can reuse. What each turn draws (its message and its output length) comes from a random stream of its
own, seeded by the workload seed, the conversation and the turn, so a conversation is the same
whatever the timing; only the answers differ between targets.

Where no answer is known (the simulator, the remote driver, the theoretical hit rate), a turn's answer
is a stand-in of the output length asked for: ids drawn from the conversation's own stream.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from backend.workload.prompt_fit import PromptMaker
from backend.workload.spec import WorkloadSpec

TEXT_JOIN = "\n\n"   # between a turn's messages in a text prompt (the shipped texts are joined the same way)


@dataclass(slots=True)
class Turn:
    """One turn's prompt, as the source hands it out."""

    prompt_ids: list[int]
    prompt_text: str
    max_new_tokens: int
    history_len: int = 0     # leading prompt ids that repeat the conversation so far (earlier prompts and answers)
    message_text: str = ""   # the texts this turn's new message came from ("" for synthetic ids)


@dataclass(slots=True)
class Conversation:
    """A conversation in progress: its prompt so far and the turn that comes next."""

    conversation_id: int
    ids: list[int] = field(default_factory=list)   # the last turn's prompt (its answer appended once known)
    text: str = ""
    next_turn: int = 0
    last_max_new: int = 0


class ConversationPrompts:
    """Builds each turn's prompt for a WorkloadSource (see the module's docstring)."""

    def __init__(self, spec: WorkloadSpec, maker: PromptMaker, vocab_size: int, max_prompt_len: int | None):
        self.spec = spec
        self.maker = maker
        self.vocab_size = vocab_size
        self.max_prompt_len = max_prompt_len
        self._shared: tuple[list[int], str] | None = None

    def shared_prefix(self) -> tuple[list[int], str]:
        """The shared prefix's ids and text, built once from the seed alone."""
        if self._shared is None:
            n = self.spec.shared_prefix_len
            self._shared = self.maker.make(random.Random(f"{self.spec.seed}:shared-prefix"), n) if n else ([], "")
        return self._shared

    def first(self, rng: random.Random, n: int) -> tuple[list[int], str]:
        """A first prompt of n tokens: the shared prefix's first tokens, then tokens drawn from rng."""
        if self.max_prompt_len is not None:
            n = min(n, self.max_prompt_len)
        shared, shared_text = self.shared_prefix()
        head = shared[:n]
        if len(head) == n:
            return list(head), shared_text
        rest, text = self.maker.make(rng, n - len(head))
        joined = TEXT_JOIN.join(t for t in (shared_text, text) if t)
        return head + rest, joined

    def turn(self, conv: Conversation) -> Turn:
        """The prompt of conv's next turn (its answer to the previous one already appended)."""
        rng = random.Random(f"{self.spec.seed}:conversation:{conv.conversation_id}:turn:{conv.next_turn}")
        if conv.next_turn == 0:
            ids, text = self.first(rng, self.spec.prompt_len.sample(rng))
            max_new = self.spec.output_len.sample(rng)
            return Turn(ids, text, max_new)
        m = (self.spec.turn_len or self.spec.prompt_len).sample(rng)
        max_new = self.spec.output_len.sample(rng)
        message, message_text = self.maker.make(rng, m)
        text = TEXT_JOIN.join(t for t in (conv.text, message_text) if t)
        return Turn(conv.ids + message, text, max_new, history_len=len(conv.ids), message_text=message_text)

    def stand_in_answer(self, conv: Conversation, turn: int, length: int) -> list[int]:
        """An answer of `length` ids where the real one is not known, drawn from the conversation's stream."""
        rng = random.Random(f"{self.spec.seed}:conversation:{conv.conversation_id}:answer:{turn}")
        if self.vocab_size == 1:
            return [0] * length
        return rng.choices(range(self.vocab_size), k=length)
