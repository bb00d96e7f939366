"""Which thread is stalled, and on what: signatures applied to stacks. Pure.

Rules, in order:
* a thread seen frozen across rounds (or seen once) is a candidate; threads
  that changed between rounds are only used when no frozen thread matches;
* among the candidate matches the highest ``priority`` wins, across all threads
  of all processes: a CUDA-graph replay frame anywhere in a stalled process
  beats the generic synchronize wait it causes;
* no match: ``unknown``, with the innermost non-stdlib frames of the most
  telling thread as evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from hangwatch.diagnostics.signatures import Signature
from hangwatch.diagnostics.stacks import Frame, ProcessSeries, ThreadDump

UNKNOWN_TITLE = "No known signature matched"
UNKNOWN_ADVICE = (
    "Look at the evidence frames (innermost frames outside the standard library) of the "
    "stalled thread; if this recurs, add a signature for it with --signatures FILE."
)


@dataclass(frozen=True)
class Match:
    signature_id: str
    pid: int | None
    thread: str
    frames: tuple[Frame, ...]

    def to_json(self) -> dict[str, Any]:
        return {"signature_id": self.signature_id, "pid": self.pid, "thread": self.thread, "frames": [f.render() for f in self.frames]}


@dataclass(frozen=True)
class Classification:
    signature_id: str | None
    title: str
    advice: str
    pid: int | None
    cmdline: str
    thread_name: str
    thread_ident: str
    evidence: tuple[Frame, ...]
    stack: tuple[Frame, ...]
    frozen: bool | None
    rounds: int
    also: tuple[Match, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "signature_id": self.signature_id,
            "title": self.title,
            "advice": self.advice,
            "pid": self.pid,
            "cmdline": self.cmdline,
            "thread": {"name": self.thread_name, "ident": self.thread_ident},
            "frozen": self.frozen,
            "rounds": self.rounds,
            "evidence": [f.render() for f in self.evidence],
            "stack": [f.render() for f in self.stack],
            "also_matched": [m.to_json() for m in self.also],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Classification":
        """For bundles: rendered frames come back as short-name frames."""
        from hangwatch.diagnostics.pyspy import parse_frame_text  # noqa: PLC0415

        return cls(
            data.get("signature_id"),
            data.get("title", ""),
            data.get("advice", ""),
            data.get("pid"),
            data.get("cmdline", ""),
            (data.get("thread") or {}).get("name", ""),
            (data.get("thread") or {}).get("ident", ""),
            tuple(parse_frame_text(s) for s in data.get("evidence", ())),
            tuple(parse_frame_text(s) for s in data.get("stack", ())),
            data.get("frozen"),
            int(data.get("rounds", 1)),
        )

    def summary(self) -> str:
        what = self.signature_id or "unknown"
        frozen = {True: "frozen across rounds", False: "changing between rounds", None: "single look"}[self.frozen]
        return f"{what}: {self.title} — pid {self.pid}, thread {self.thread_name!r} ({frozen})"


@dataclass(frozen=True)
class _Candidate:
    series: ProcessSeries
    thread: ThreadDump
    frozen: bool | None


def classify(series: Sequence[ProcessSeries], signatures: Sequence[Signature]) -> Classification | None:
    """None only when there are no threads at all."""
    candidates = [
        _Candidate(s, t, s.frozen(t.ident)) for s in series if s.dumps for t in s.latest.threads
    ]
    if not candidates:
        return None
    steady = [c for c in candidates if c.frozen is not False]
    matches = _matches(steady, signatures) or _matches(candidates, signatures)
    rounds = max(len(s.dumps) for s in series)
    if matches:
        by_priority = {s.id: s.priority for s in signatures}
        # Ties: frozen beats single-look, then deeper evidence.
        matches.sort(key=lambda m: (-by_priority[m[1].id], m[0].frozen is not True, -len(m[2])))
        best, sig, frames = matches[0]
        also = tuple(
            Match(s.id, c.series.pid, c.thread.name, fr) for c, s, fr in matches[1:] if (c, s.id) != (best, sig.id)
        )
        return _result(best, sig.id, sig.title, sig.advice, frames, rounds, also)
    best = min(candidates, key=_telling_rank)
    return _result(best, None, UNKNOWN_TITLE, UNKNOWN_ADVICE, best.thread.telling_frames(), rounds, ())


def _matches(cands: Sequence[_Candidate], signatures: Sequence[Signature]) -> list[tuple[_Candidate, Signature, tuple[Frame, ...]]]:
    out = []
    for c in cands:
        for sig in signatures:
            frames = sig.match_thread(c.thread, c.series.cmdline)
            if frames:
                out.append((c, sig, frames))
    return out


def _telling_rank(c: _Candidate) -> tuple:
    """Frozen first, then threads with own (non-stdlib) code, main thread, deepest."""
    own = len(c.thread.telling_frames(limit=1000))
    return (c.frozen is False, own == 0, c.thread.name != "MainThread", -own)


def _result(c: _Candidate, sid, title, advice, evidence, rounds, also) -> Classification:
    return Classification(
        signature_id=sid,
        title=title,
        advice=advice,
        pid=c.series.pid,
        cmdline=c.series.cmdline,
        thread_name=c.thread.name,
        thread_ident=c.thread.ident,
        evidence=tuple(evidence),
        stack=c.thread.frames,
        frozen=c.frozen,
        rounds=rounds,
        also=also,
    )
