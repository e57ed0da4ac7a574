"""The two kinds of failure a user can meet, each shown as one line (never a traceback)."""


class InputError(Exception):
    """Bad input from the user: a flag, a file, a model name. The CLI exits with status 2."""


class RunError(Exception):
    """A failure while running (out of memory, a device error). The CLI exits with status 1."""
