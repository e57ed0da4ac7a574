"""phasescope's backend, no Qt anywhere in it: the flow workload -> session -> sweep -> target ->
engine -> records -> results, each a package (cli/ on top; the vocabulary every layer shares at
the bottom: events, config, records, precision, shape, errors). docs/architecture.md lists them."""
__version__ = "0.1.0"
# The oldest torch the code runs on: F.rms_norm came in 2.4, scaled_dot_product_attention's
# enable_gqa in 2.5. pyproject.toml's floor is this one (a test says so); `doctor` names an older one.
TORCH_FLOOR = (2, 5)
