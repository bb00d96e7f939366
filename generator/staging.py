"""Stage policy weights through shared memory as one safetensors file.

The writer produces a standard safetensors file (readable by
``safetensors.safe_open``) but writes each tensor straight from its storage
(``memoryview``; ``safetensors.torch.save_file`` first builds a ``bytes``
copy of every tensor) and fingerprints the same view in the same pass, so
staging costs one copy into /dev/shm plus one hash pass over hot memory.

The reader maps the file copy-on-write and wraps the mapping with
``torch.frombuffer``: the tensors it yields alias the file's pages, and the
engine's ``load_weights`` copy into the model is the only copy on that side.

``Stager`` keeps one staging file per generator and rewrites it in place when
the layout (names, dtypes, shapes) is unchanged, the case of every GRPO step
after the first: writing into pages that are already allocated costs a plain
memory copy, while a new file pays the kernel's first-touch allocation of
every page (about 10x a warm copy on the machine the benchmark ran on). The
price is host memory the size of the weights held in /dev/shm between syncs;
``reuse=False`` writes a new file each time and removes it after the load.

Invariants: a new file becomes visible under its final name only when
complete (written to a temp name in the same directory, then renamed). A
reused file is rewritten while no reader is told about it: the worker is sent
its path only after ``stage`` returns, and proves what it loaded by the
digest, so a torn rewrite is refused, never loaded silently.
"""

from __future__ import annotations

import concurrent.futures
import json
import mmap
import os
import secrets
import struct
import tempfile
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import torch
import xxhash

from hangwatch.contract import ownerlock
from hangwatch.generator import fingerprint as fp

_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}
_TORCH = {v: k for k, v in _DTYPES.items()}


_PREFIX = ".hangwatch-weights-"
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # map every page up front, not one fault at a time


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
        ownerlock.release(self.path)


def stage(named: Iterable[tuple[str, torch.Tensor]], directory: str | None = None) -> StagedWeights:
    """Write ``named`` tensors (CPU) to a new safetensors file, fingerprinting them in the same pass."""
    plan = _plan(named)
    directory = directory or default_staging_dir()
    fd, tmp = tempfile.mkstemp(prefix=f"{_PREFIX}{os.getpid()}-", suffix=".safetensors.tmp", dir=directory)
    try:
        # A final name of its own, unguessable, never the temp name less ".tmp": the
        # directory is shared (/dev/shm), and another user who saw the temp name
        # claimed that one first, so the rename (EPERM in a sticky directory) failed
        # every weight sync of the run.
        final = os.path.join(directory, f"{_PREFIX}{os.getpid()}-{secrets.token_hex(16)}.safetensors")
        # Held while we live: the sweep of another trainer (maybe in another pid
        # namespace sharing /dev/shm) can then never take this file for an orphan.
        ownerlock.hold(final, fd)
        with os.fdopen(fd, "wb", buffering=0) as out:
            manifest = _write(out, plan)
        os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return StagedWeights(path=final, manifest=manifest, digest=fp.manifest_digest(manifest), nbytes=plan.nbytes)


class Stager:
    """Stages every sync into one file it keeps (see the module docstring)."""

    def __init__(self, directory: str | None = None, reuse: bool = True) -> None:
        self.directory = directory or default_staging_dir()
        self.reuse = reuse
        self._current: StagedWeights | None = None
        self._layout: bytes | None = None
        self._map: mmap.mmap | None = None
        sweep_orphans(self.directory)

    def stage(self, named: Iterable[tuple[str, torch.Tensor]]) -> StagedWeights:
        plan = _plan(named)
        current = self._current
        if self.reuse and current is not None and plan.header == self._layout and os.path.exists(current.path):
            if self._map is None:
                with open(current.path, "r+b") as handle:
                    # Kept open across syncs: a new mapping would page-fault on every
                    # page again, which costs more than the copy itself.
                    self._map = mmap.mmap(handle.fileno(), 0, flags=mmap.MAP_SHARED | _POPULATE,
                                          prot=mmap.PROT_READ | mmap.PROT_WRITE)
            manifest = _rewrite_in_place(self._map, plan)
            staged = StagedWeights(current.path, manifest, fp.manifest_digest(manifest), plan.nbytes)
        else:
            self.discard()
            staged = stage(_named(plan), self.directory)
        self._current, self._layout = staged, plan.header
        return staged

    def done(self, staged: StagedWeights) -> None:
        """The worker has loaded ``staged``: keep the file for the next sync, or remove it."""
        if not self.reuse:
            staged.remove()
            self._current = None

    def discard(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._current is not None:
            self._current.remove()
        self._current = self._layout = None


def sweep_orphans(directory: str) -> list[str]:
    """Remove staging files left by processes that died (a trainer killed after a
    wedge never cleans up, and each file holds the weights' size in RAM). Only
    files named with our prefix, ours, never a symlink, and only when the owner
    is certainly dead: its lock is free and its pid does not exist
    (``contract.ownerlock``)."""
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(_PREFIX):
            continue
        pid_text = name[len(_PREFIX):].split("-", 1)[0]
        if not pid_text.isdigit():
            continue
        path = os.path.join(directory, name)
        fd = ownerlock.abandoned(path, int(pid_text))
        if fd is None:
            continue
        try:
            os.unlink(path)  # unlink never follows a symlink
            removed.append(name)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


@dataclass(frozen=True)
class _Plan:
    header: bytes  # the safetensors header: equal headers mean an identical layout
    views: list[tuple[str, torch.Tensor, memoryview]]
    nbytes: int


def _plan(named: Iterable[tuple[str, torch.Tensor]]) -> _Plan:
    header: dict[str, Any] = {}
    offset = 0
    views = []
    for name, tensor in named:
        tensor = tensor.detach()
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
    return _Plan(raw, views, offset)


def _named(plan: _Plan) -> Iterator[tuple[str, torch.Tensor]]:
    return ((name, tensor) for name, tensor, _ in plan.views)


def _write(out: Any, plan: _Plan) -> dict[str, dict[str, Any]]:
    """Header then data, hashing each tensor's bytes as they go out."""
    _write_all(out, struct.pack("<Q", len(plan.header)) + plan.header)
    manifest: dict[str, dict[str, Any]] = {}
    for name, tensor, view in plan.views:
        digest = xxhash.xxh3_128_hexdigest(view)
        _write_all(out, view)
        manifest[name] = fp.entry(tensor, digest)
    return manifest


def _rewrite_in_place(mapped: mmap.mmap, plan: _Plan) -> dict[str, dict[str, Any]]:
    """Copy each tensor into the file's shared mapping (a memcpy into pages that are
    already allocated and mapped, several times faster than write(2) on tmpfs) while
    a second thread hashes the same source bytes (both release the GIL, so the two
    passes overlap); the header, identical by construction, stays as it is."""
    base = 8 + len(plan.header)
    offset = 0
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="stage-hash") as pool:
        digests = [pool.submit(xxhash.xxh3_128_hexdigest, view) for _, _, view in plan.views]
        for _, _, view in plan.views:
            n = view.nbytes
            if n:
                dst = torch.frombuffer(mapped, dtype=torch.uint8, count=n, offset=base + offset)
                dst.copy_(torch.frombuffer(view, dtype=torch.uint8))
                del dst  # release the buffer export so the mapping can be closed later
            offset += n
        return {name: fp.entry(tensor, digest.result()) for (name, tensor, _), digest in zip(plan.views, digests)}


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
