"""A GGUF file's header in one pass: the metadata as Python values, and each tensor's name, type,
shape and bytes as a view of the memory-mapped file.

gguf's own GGUFReader builds a numpy view for every part of every field, so the bundled model's
49,152 token strings and merges cost it most of a model load (about 1.5 s of 3 s on a quiet core);
this reads the same fields with struct in a few tens of milliseconds. The tensors' bytes are
never read here: `GGUFTensor.data` is a view that the dequantizer (gguf.quants) reads on demand.
Layout (GGUF v2 and v3, little-endian): magic, version u32, tensor count u64, metadata count u64,
the metadata (key string, value type u32, value), the tensor infos (name, n_dims u32, dims u64
innermost first, type u32, offset u64), padding to `general.alignment` (32), the tensor data.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32

# GGUF's value types: struct code of a scalar, by type number (8 STRING and 9 ARRAY are read apart)
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_NUMPY = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32,
          7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}
STRING, ARRAY = 8, 9
_U64 = struct.Struct("<Q")   # a string's length
# tensor types held as plain numbers (the rest are blocks of bytes)
_PLAIN = {GGMLQuantizationType.F32: np.float32, GGMLQuantizationType.F16: np.float16,
          GGMLQuantizationType.F64: np.float64, GGMLQuantizationType.I8: np.int8,
          GGMLQuantizationType.I16: np.int16, GGMLQuantizationType.I32: np.int32,
          GGMLQuantizationType.I64: np.int64}


@dataclass(frozen=True, slots=True)
class GGUFTensor:
    name: str
    tensor_type: GGMLQuantizationType
    shape: tuple[int, ...]          # innermost first, as the file lists it
    data: np.ndarray                # numbers for plain types; (outer dims..., bytes of a row) of uint8 for blocks


@dataclass(frozen=True, slots=True)
class GGUFFile:
    version: int
    fields: dict[str, Any]
    tensors: dict[str, GGUFTensor]


class _Cursor:
    """Reads little-endian values from the header; running past the end is a ValueError."""

    def __init__(self, buf: memoryview) -> None:
        self.buf, self.pos = buf, 0

    def take(self, fmt: str) -> Any:
        size = struct.calcsize("<" + fmt)
        if self.pos + size > len(self.buf):
            raise ValueError(f"the file ends inside its header (at byte {self.pos:,})")
        (value,) = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self) -> str:
        n = self.take("Q")
        if self.pos + n > len(self.buf):
            raise ValueError(f"a string of {n:,} bytes runs past the end of the file (at byte {self.pos:,})")
        text = str(self.buf[self.pos:self.pos + n], "utf-8")
        self.pos += n
        return text

    def strings(self, count: int) -> list[str]:
        """`count` strings in a row: string()'s loop with its lookups hoisted (a vocabulary's 49,152
        tokens and 48,900 merges were a tenth of a model load)."""
        buf, pos, end = self.buf, self.pos, len(self.buf)
        length = _U64.unpack_from
        out = []
        append = out.append
        for _ in range(count):
            if pos + 8 > end:
                raise ValueError(f"the file ends inside its header (at byte {pos:,})")
            (n,) = length(buf, pos)
            pos += 8
            if pos + n > end:
                raise ValueError(f"a string of {n:,} bytes runs past the end of the file (at byte {pos:,})")
            append(str(buf[pos:pos + n], "utf-8"))
            pos += n
        self.pos = pos
        return out

    def value(self, kind: int) -> Any:
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            sub, count = self.take("I"), self.take("Q")
            if sub == STRING:
                return self.strings(count)
            if sub == ARRAY:
                return [self.value(ARRAY) for _ in range(count)]
            if sub not in _NUMPY:
                raise ValueError(f"unknown GGUF value type {sub}")
            nbytes = count * np.dtype(_NUMPY[sub]).itemsize
            if self.pos + nbytes > len(self.buf):
                raise ValueError(f"an array of {count:,} values runs past the end of the file")
            values = np.frombuffer(self.buf, _NUMPY[sub], count, self.pos).tolist()
            self.pos += nbytes
            return values
        if kind not in _SCALARS:
            raise ValueError(f"unknown GGUF value type {kind}")
        return self.take(_SCALARS[kind])


def read_gguf(path: Path | str) -> GGUFFile:
    """The file's metadata and tensors; ValueError (with what is wrong) for anything unreadable."""
    data = np.asarray(np.memmap(path, mode="r"))   # a plain array over the mapping: numpy's memmap
    # subclass costs a Python call on every view the dequantizer takes (hundreds of thousands)
    cursor = _Cursor(memoryview(data))
    if bytes(cursor.buf[:4]) != MAGIC:
        raise ValueError("GGUF magic invalid")
    cursor.pos = 4
    version = cursor.take("I")
    if version & 0xFFFF == 0:
        raise ValueError("the file is big-endian; only little-endian GGUF files are read")
    if version not in VERSIONS:
        raise ValueError(f"GGUF version {version} (only {' and '.join(map(str, VERSIONS))} are read)")
    num_tensors, num_fields = cursor.take("Q"), cursor.take("Q")
    fields: dict[str, Any] = {}
    for _ in range(num_fields):
        key = cursor.string()
        fields[key] = cursor.value(cursor.take("I"))
    infos = []
    for _ in range(num_tensors):
        name = cursor.string()
        dims = tuple(cursor.take("Q") for _ in range(cursor.take("I")))
        infos.append((name, dims, GGMLQuantizationType(cursor.take("I")), cursor.take("Q")))
    alignment = fields.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"general.alignment {alignment!r} is not a power of two")
    start = -(-cursor.pos // alignment) * alignment
    tensors: dict[str, GGUFTensor] = {}
    for name, dims, kind, offset in infos:
        if name in tensors:
            raise ValueError(f"tensor {name} is listed twice")
        tensors[name] = GGUFTensor(name, kind, dims, _view(data, start + offset, dims, kind))
    return GGUFFile(version, fields, tensors)


def _view(data: np.ndarray, offset: int, dims: tuple[int, ...], kind: GGMLQuantizationType) -> np.ndarray:
    """The tensor's bytes, outermost dimension first: numbers, or rows of blocks as uint8."""
    outer = tuple(reversed(dims))
    count = int(np.prod(dims, dtype=np.int64))
    if kind in _PLAIN:
        dtype, shape = np.dtype(_PLAIN[kind]), outer
        nbytes = count * dtype.itemsize
    else:
        block, size = GGML_QUANT_SIZES[kind]
        if outer[-1] % block:
            raise ValueError(f"a row of {outer[-1]} is not whole {kind.name} blocks of {block}")
        dtype, shape = np.dtype(np.uint8), (*outer[:-1], outer[-1] // block * size)
        nbytes = count // block * size
    if offset + nbytes > len(data):
        raise ValueError(f"tensor data ends past the end of the file ({offset + nbytes:,} > {len(data):,} bytes)")
    return data[offset:offset + nbytes].view(dtype).reshape(shape)
