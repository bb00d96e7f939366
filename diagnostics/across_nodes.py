"""The culprit across a multi-node job's bundles, from each node's process rows.

Each node of a cohort captures only its own processes. When one rank blocks outside a
collective, the node that hosts it can name it, while every other node sees only a crowd
waiting in the collective ("the culprit is not among them"). The nodes exchange a compact
row per process (``Classification.process_rows``, carried in their agreement reports) and
each node reads the same story from all of them, with the same rule as one input
(``classify.find_suspect``): every node's record then names the same rank.

Rows come from other machines through a store: every field is checked and bounded here,
and a row that is not what a node writes is skipped, never trusted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from hangwatch.diagnostics.classify import NO_STACKS, find_suspect
from hangwatch.diagnostics.pyspy import parse_frame_text
from hangwatch.diagnostics.stacks import Frame

#: at most this many rows per node, and this many characters per rendered frame
MAX_ROWS = 64
MAX_FRAME_CHARS = 300
_STATES = {"stalled", "waiting", "idle", "unknown", NO_STACKS}


@dataclass(frozen=True)
class RowVerdict:
    """A process of another node as its row says: what ``find_suspect`` reads of a verdict."""

    source: str
    pid: int | None
    rank: int | None
    state: str
    signature_id: str | None
    collective: bool
    waiting_for_work: bool
    evidence: tuple[Frame, ...]
    top: tuple[Frame, ...]
    note: str = ""
    node: int = 0

    def top_frames(self, n: int = 2) -> tuple[Frame, ...]:
        return self.top[:n]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31 else None


def _frames(value: Any, n: int) -> tuple[Frame, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(parse_frame_text(v[:MAX_FRAME_CHARS]) for v in value[:n] if isinstance(v, str) and v.strip())


def row_verdict(node: int, row: Any) -> RowVerdict | None:
    """One row as a verdict; None when it is not a row a node writes."""
    if not isinstance(row, Mapping):
        return None
    state = row.get("state")
    if state not in _STATES:
        return None
    sig = row.get("signature_id")
    return RowVerdict(
        source=f"node {node}",
        pid=_int(row.get("pid")),
        rank=_int(row.get("rank")),
        state="stalled" if state == "waiting" else str(state),
        signature_id=sig[:100] if isinstance(sig, str) else None,
        collective=row.get("collective") is True and state == "stalled",
        waiting_for_work=state == "waiting",
        evidence=_frames(row.get("evidence"), 3),
        top=_frames(row.get("top_frames"), 3),
        note=str(row.get("note") or "")[:200],
        node=node,
    )


def culprit_across(rows_by_node: Mapping[int, Sequence[Any]]) -> dict[str, Any] | None:
    """The process that holds a multi-node job up, read from every node's rows.

    ``{"node", "rank", "pid", "signature_id", "reason"}`` for a culprit; ``{"present": False,
    "note"}`` when every process waits in the collective (the culprit was not captured
    anywhere); None when the rows say nothing (no crowd to differ from).
    """
    verdicts: list[RowVerdict] = []
    for node in sorted(rows_by_node):
        rows = rows_by_node[node]
        if not isinstance(rows, Sequence) or isinstance(rows, (str, bytes)):
            continue
        verdicts.extend(v for v in (row_verdict(node, r) for r in rows[:MAX_ROWS]) if v is not None)
    story = find_suspect(verdicts)  # type: ignore[arg-type]  (a RowVerdict reads as a ProcessVerdict there)
    s = story.suspect
    if s is not None:
        assert isinstance(s, RowVerdict)
        return {"node": s.node, "rank": s.rank, "pid": s.pid,
                "signature_id": s.signature_id if s.state == "stalled" else None, "reason": story.reason}
    if story.note:
        return {"present": False, "note": story.note}
    return None
