"""phasescope's backend, no Qt anywhere in it: the flow workload -> session -> sweep -> target ->
engine -> records -> results, each a package (cli/ on top; the vocabulary every layer shares at
the bottom: events, config, records, precision, shape, errors). docs/architecture.md lists them."""
__version__ = "0.1.0"
