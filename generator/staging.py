"""Stage policy weights through shared memory as one safetensors file.

The writer produces a standard safetensors file (readable by
``safetensors.safe_open``) but writes each tensor straight from its storage
(``memoryview``; ``safetensors.torch.save_file`` first builds a ``bytes``
copy of every tensor) and fingerprints the same view in the same pass, so
staging costs one copy into /dev/shm plus one hash pass over hot memory.

The reader maps the file copy-on-write and wraps the mapping with
``torch.frombuffer``: the tensors it yields alias the file's pages, and the
engine's ``load_weights`` copy into the model is the only copy on that side.

Invariant: a file becomes visible under its final name only when complete
(written to a temp name in the same directory, then renamed).
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import tempfile
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import torch
import xxhash

from generator import fingerprint as fp

_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}
_TORCH = {v: k for k, v in _DTYPES.items()}


def default_staging_dir() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


@dataclass(frozen=True)
class StagedWeights:
    path: str
    manifest: dict[str, dict[str, Any]]
    digest: str
    nbytes: int

    def remove(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def stage(named: Iterable[tuple[str, torch.Tensor]], directory: str | None = None) -> StagedWeights:
    """Write ``named`` tensors (CPU) to one safetensors file and fingerprint them in the same pass."""
    items = [(name, tensor.detach()) for name, tensor in named]
    header: dict[str, Any] = {}
    offset = 0
    views = []
    for name, tensor in items:
        if tensor.device.type != "cpu":
            raise ValueError(f"stage() needs CPU tensors; {name!r} is on {tensor.device}")
        if tensor.dtype not in _DTYPES:
            raise ValueError(f"stage() cannot write dtype {tensor.dtype} of {name!r}")
        view = fp.tensor_bytes(tensor)
        header[name] = {"dtype": _DTYPES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + view.nbytes]}
        views.append((name, tensor, view))
        offset += view.nbytes
    header["__metadata__"] = {"format": "pt", "writer": "hangwatch"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors aligns the data section to 8 bytes

    directory = directory or default_staging_dir()
    fd, tmp = tempfile.mkstemp(prefix=".weights-", suffix=".safetensors.tmp", dir=directory)
    manifest: dict[str, dict[str, Any]] = {}
    try:
        with os.fdopen(fd, "wb", buffering=0) as out:
            _write_all(out, struct.pack("<Q", len(raw)) + raw)
            for name, tensor, view in views:
                digest = xxhash.xxh3_128_hexdigest(view)
                _write_all(out, view)
                manifest[name] = fp.entry(tensor, digest)
        final = tmp[: -len(".tmp")]
        os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return StagedWeights(path=final, manifest=manifest, digest=fp.manifest_digest(manifest), nbytes=offset)


def _write_all(out: Any, data: Any) -> None:
    view = memoryview(data).cast("B")
    while view:
        written = out.write(view)
        view = view[written:]


class StagedReader:
    """Zero-copy tensors of a staged file; keep the reader open while they are used."""

    def __init__(self, path: str):
        with open(path, "rb") as handle:
            (size,) = struct.unpack("<Q", handle.read(8))
            self._header = json.loads(handle.read(size))
            self._base = 8 + size
            # ACCESS_COPY: a writable private mapping, so torch.frombuffer does
            # not warn about read-only memory, and the file stays untouched.
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)

    def names(self) -> list[str]:
        return [k for k in self._header if k != "__metadata__"]

    def tensor(self, name: str) -> torch.Tensor:
        info = self._header[name]
        begin, end = info["data_offsets"]
        dtype = _TORCH[info["dtype"]]
        shape = info["shape"]
        if end == begin:
            return torch.empty(shape, dtype=dtype)
        flat = torch.frombuffer(self._map, dtype=dtype, count=(end - begin) // dtype.itemsize,
                                offset=self._base + begin)
        return flat.reshape(shape)

    def items(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name in self.names():
            yield name, self.tensor(name)

    def close(self) -> None:
        try:
            self._map.close()
        except BufferError:
            # A tensor still aliases the mapping; the GC unmaps it when that goes.
            pass

    def __enter__(self) -> "StagedReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
