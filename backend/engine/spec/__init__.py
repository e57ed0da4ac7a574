"""Speculative decoding: proposers guess a request's next tokens, the target model checks them all in one
step (the request's last token and its guesses, logits at every position: on the C kernels as decode rows
of its table row, elsewhere a short prefill segment) and keeps the longest prefix it agrees with, plus one
token of its own. acceptance.py holds the rule, ngram.py and draft.py the proposers, speculator.py what the
engine loop asks of them."""
