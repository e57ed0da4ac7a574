"""The window's state, with no Qt (an import-linter contract says so): the run store and its
preallocated buffers, the live metrics computed from it, reference runs, and the disaggregated
workers' rows. Views read it; slots fill it; tests run it without a display."""
