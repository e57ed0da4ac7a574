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


# What a CUDA fault's message holds. After one, the process's CUDA context is unusable: every later
# call fails with the same error, so the process that met it must end (an out-of-memory error is
# not one: the allocator recovers).
DEVICE_FAULTS = ("cuda error", "device-side assert", "illegal memory access", "unspecified launch failure",
                 "cublas_status_execution_failed", "cudnn_status_execution_failed", "acceleratorerror")


def is_device_fault(error: BaseException | str | None) -> bool:
    """A CUDA error that leaves the process's device unusable (an exception, or its one line)."""
    if error is None:
        return False
    text = (str(error) if isinstance(error, str) else f"{type(error).__name__}: {error}").lower()
    return not ("out of memory" in text) and any(fault in text for fault in DEVICE_FAULTS)
