"""The two kinds of failure a user can meet, each shown as one line (never a traceback)."""


class InputError(Exception):
    """Bad input from the user: a flag, a file, a model name. The CLI exits with status 2."""


class DoesNotFit(InputError):
    """A run larger than the device's (or the profile's) memory, refused before anything is allocated:
    the one check of the local and the simulated targets; a sweep stops at the first point that raises it."""


class RunError(Exception):
    """A failure while running (out of memory, a device error). The CLI exits with status 1."""


def is_out_of_memory(exc: BaseException) -> bool:
    """An allocation failure: MemoryError, torch's OutOfMemoryError, or a device or CPU allocator's message."""
    text = str(exc).lower()
    return (isinstance(exc, MemoryError) or "OutOfMemory" in type(exc).__name__ or "out of memory" in text
            or "can't allocate memory" in text)


def one_line(exc: BaseException, typed: bool = False, limit: int | None = None) -> str:
    """An exception as one line: the first line of its message (at most `limit` characters), or
    its type's name when it has none. `typed` puts what failed in front: "out of memory" for an
    allocation failure, else the type's name ("ValueError: bad value")."""
    lines = str(exc).strip().splitlines()
    name = type(exc).__name__
    text = lines[0][:limit] if lines else name
    if not typed:
        return text
    kind = "out of memory" if is_out_of_memory(exc) else name
    return kind if text == kind else f"{kind}: {text}"
