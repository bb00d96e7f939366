"""Replay: classify many incidents (bundles and raw py-spy dumps), aggregate them,
and re-run the detector on recorded samples with other settings (what-if). Pure
apart from reading the inputs.
"""

from __future__ import annotations

import json
import zlib
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from hangwatch.contract.capped import FileTooLarge, NotRegularFile, read_capped
from hangwatch.diagnostics.bundle import Bundle, list_bundles, load_bundle
from hangwatch.diagnostics.classify import NO_STACKS, Classification, Overview, ProcessVerdict, headline, overview, process_verdicts
from hangwatch.diagnostics.errors import InputError
from hangwatch.diagnostics.gpustate import describe_reading, readings
from hangwatch.diagnostics.pastes import ParseReport, read_text
from hangwatch.diagnostics.pyspy import parse_json
from hangwatch.diagnostics.signatures import Signature
from hangwatch.diagnostics.stacks import Frame, ProcessSeries, ThreadDump, group_series
from hangwatch.diagnostics.waits import guessed_wait
from hangwatch.contract.samples import Sample
from hangwatch.contract.terminal import one_line
from hangwatch.contract.verdict import Verdict


#: A dump file larger than this is refused (py-spy's text for a process with a
#: few hundred threads is well under a MiB; a bigger file is a log, not a dump).
MAX_DUMP_BYTES = 16 * 1024 * 1024
#: Rows of the process table printed as text (``--json`` has them all).
MAX_TABLE_ROWS = 200
#: Threads per process whose wait is reported (the deciding one first), lines of the
#: text's "waits on" list, and entries of ``waits_on`` in --json.
WAIT_THREADS_PER_PROCESS = 4
MAX_WAIT_LINES = 20
MAX_WAITS_JSON = 500


@dataclass(frozen=True)
class Source:
    """One input: its stacks, the bundle when it is one, and what the text
    reader skipped when it is a paste."""

    name: str
    kind: str  # bundle | json | text
    series: tuple[ProcessSeries, ...]
    bundle: Bundle | None = None
    parse: ParseReport | None = None

    def undumped(self) -> list[ProcessVerdict]:
        """Processes of a bundle that py-spy could not dump (timeout, ptrace, gone), and
        those a paste shows py-spy failing on ("Error: Failed to suspend process")."""
        have = {s.pid for s in self.series}
        if self.bundle is None:
            failed = self.parse.undumped if self.parse is not None else {}
            return [ProcessVerdict(None, NO_STACKS, source=self.name, pid_override=pid, note=f"py-spy: {problem}")
                    for pid, problem in failed.items() if pid not in have]
        seen: dict[int, str] = {}
        rounds = ((self.bundle.manifest.get("stacks") or {}).get("rounds")) or []
        for r in rounds:
            for d in (r.get("dumps") or []) if isinstance(r, dict) else []:
                pid = d.get("pid") if isinstance(d, dict) else None
                # A shell wrapper (not_python) is no suspect.
                if isinstance(pid, int) and not d.get("ok") and pid not in have and d.get("problem") != "not_python":
                    seen.setdefault(pid, str(d.get("problem") or "failed"))
        return [ProcessVerdict(None, NO_STACKS, source=self.name, pid_override=pid, note=problem) for pid, problem in seen.items()]


#: ``detect(samples, thresholds) -> (verdict or None, the thresholds it ran with)``.
#: The supervisor's detector, injected by the CLI: diagnostics does not import
#: the supervisor. Raises ``ConfigError`` on thresholds out of range.
WhatIfDetector = Callable[[Sequence[Sample], Mapping[str, Any]], "tuple[Verdict | None, Mapping[str, Any]]"]


@dataclass(frozen=True)
class WhatIf:
    config: Mapping[str, Any]  # the detector settings the what-if ran with (JSON)
    samples: int
    span_s: float
    verdict: Verdict | None
    recorded: Mapping[str, Any] = field(default_factory=dict)
    t0: float = 0.0

    def describe(self) -> str:
        if not self.samples:
            return "what-if: no samples recorded"
        c = self.config
        settings = (f"stall-window {c.get('stall_window', 0):g} s, gpu-busy {c.get('gpu_busy_pct', 0):g}%, "
                    f"cpu-idle {c.get('cpu_idle_pct', 0):g}%, progress-timeout {c.get('progress_timeout')} s")
        rec = self.recorded.get("detected_at")
        rec_txt = f"; recorded verdict at +{rec - self.t0:.1f} s" if isinstance(rec, (int, float)) else ""
        if self.verdict is None:
            return f"what-if ({settings}): would NOT fire within the recorded {self.span_s:.0f} s ({self.samples} samples){rec_txt}"
        v = self.verdict
        return (f"what-if ({settings}): would fire {v.kind.value} at +{v.detected_at - self.t0:.1f} s "
                f"(onset +{v.onset - self.t0:.1f} s): {v.reason}{rec_txt}")

    def to_json(self) -> dict[str, Any]:
        return {
            "config": dict(self.config),
            "samples": self.samples,
            "span_s": round(self.span_s, 3),
            "fired": self.verdict is not None,
            "kind": self.verdict.kind.value if self.verdict else None,
            "detected_after_s": round(self.verdict.detected_at - self.t0, 3) if self.verdict else None,
            "onset_after_s": round(self.verdict.onset - self.t0, 3) if self.verdict else None,
            "reason": self.verdict.reason if self.verdict else None,
            "recorded_detected_after_s": round(self.recorded["detected_at"] - self.t0, 3) if isinstance(self.recorded.get("detected_at"), (int, float)) else None,
            "summary": self.describe(),
        }


@dataclass(frozen=True)
class Incident:
    source: Source
    classification: Classification | None
    whatif: WhatIf | None = None
    verdicts: tuple[ProcessVerdict, ...] = ()
    #: each GPU's utilisation, power and SM clock (a bundle's; empty for a paste)
    gpu: tuple[dict[str, Any], ...] = ()
    #: processes whose stacks came by each method (``py-spy``, ``in-process``, ``none``; a bundle's)
    stack_methods: Mapping[str, int] = field(default_factory=dict)

    def waits_on(self) -> list[dict[str, Any]]:
        """What each thread of interest waits on (see ``thread_waits``)."""
        return thread_waits(self.verdicts)[:MAX_WAITS_JSON]

    def to_json(self) -> dict[str, Any]:
        c = self.classification
        manifest = self.source.bundle.manifest if self.source.bundle else {}
        return {
            "source": self.source.name,
            "kind": self.source.kind,
            "verdict": (manifest.get("verdict") or {}).get("kind"),
            "signature_id": c.signature_id if c else None,
            "title": c.title if c else "no stacks",
            "advice": c.advice if c else None,
            "evidence": [f.render() for f in c.evidence] if c else [],
            "pid": c.pid if c else None,
            "thread": c.thread_name if c else None,
            "frozen": c.frozen if c else None,
            "stack": [f.render() for f in c.stack] if c else [],
            "signature_source": (c.reference or None) if c else None,
            "processes": len(self.verdicts),
            "suspect": c.suspect.to_json() if c and c.suspect else None,
            "parse": self.source.parse.to_json() if self.source.parse else None,
            "whatif": self.whatif.to_json() if self.whatif else None,
            "waits_on": self.waits_on(),
            "gpu": list(self.gpu),
            "stack_methods": dict(self.stack_methods),
        }


def expand_inputs(paths: Iterable[str | Path]) -> list[Path]:
    """Paths as given; a run directory (with ``incidents/``) or a directory of
    bundles stands for every bundle in it."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise InputError(f"{path}: no such file or directory")
        if path.is_dir() and not (path / "manifest.json").is_file():
            found = list_bundles(path) or sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith(".") and (p / "manifest.json").is_file())
            if not found:
                raise InputError(f"{path}: directory is neither a bundle (no manifest.json) nor a run or incidents directory with bundles")
            out.extend(found)
        else:
            out.append(path)
    return out


def load_source(path: Path) -> Source:
    if path.is_dir() or path.name.endswith((".tar.gz", ".tgz")):
        b = load_bundle(path)  # it caps what it reads (bundle.MAX_MEMBER_BYTES, MAX_TOTAL_BYTES)
        return Source(str(path), "bundle", b.series(), b)
    text = read_dump_file(path)
    if text.lstrip().startswith("["):
        try:
            return Source(str(path), "json", group_series([parse_json(text, source=str(path))]))
        except InputError:
            pass  # maybe a text paste that starts with "[rank0]:"
    try:
        report = read_text(text, source=str(path))
    except InputError as exc:
        if "py-spy top or record output" in str(exc):
            raise  # it says what was pasted and what to take instead
        what = _not_text(text)
        if what:
            raise InputError(f"{path}: {what}; give a py-spy dump saved as text, a bundle or a run directory") from None
        raise InputError(
            f"{path}: neither a hangwatch bundle nor a py-spy dump (text or --json): "
            "no line looks like a stack frame ('function (file.py:line)')"
        ) from None
    return Source(str(path), "text", group_series(report.processes), parse=report)


def read_dump_file(path: Path, limit: int | None = None) -> str:
    """The file's text, refusing files over ``limit`` bytes and anything but a regular
    file (a FIFO would block the open forever, a device would never end)."""
    limit = MAX_DUMP_BYTES if limit is None else limit
    try:
        data = read_capped(path, limit)
    except NotRegularFile as exc:
        raise InputError(f"{path}: {exc.strerror}; give a bundle (directory or .tar.gz), a run directory "
                         "or a py-spy dump saved to a file") from None
    except FileTooLarge:
        raise InputError(
            f"{path}: larger than {limit / (1024 * 1024):g} MiB; a py-spy dump is far smaller: "
            "cut the file down to the stacks"
        ) from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(path, data, limit)  # a dump or log saved compressed (dump.txt.gz)
    if data[:4] == b"PK\x03\x04":
        raise InputError(f"{path}: a zip archive; unzip it and give the dump file inside")
    if data[257:262] == b"ustar":
        raise InputError(f"{path}: a tar archive; give a bundle as NAME.tar.gz, or unpack it and give the dump file")
    return decode_dump(data)


def _gunzip(path: Path, data: bytes, limit: int) -> bytes:
    """A gzip file's content, never more than ``limit`` bytes of it (a small file can
    inflate to gigabytes); every member, as gzip readers do."""
    out = bytearray()
    rest = data
    for _ in range(1024):
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out += d.decompress(rest, limit + 1 - len(out))
        except zlib.error as exc:
            raise InputError(f"{path}: a gzip file that cannot be decompressed ({exc})") from None
        if len(out) > limit or d.unconsumed_tail:
            raise InputError(f"{path}: larger than {limit / (1024 * 1024):g} MiB once decompressed; a py-spy "
                             "dump is far smaller: cut the file down to the stacks")
        rest = d.unused_data
        if not rest.strip(b"\x00"):
            break
    return bytes(out)


def _not_text(text: str) -> str:
    """Why a file that gave no frame is no paste at all ("" when it is text)."""
    if not text.strip():
        return "the file is empty"
    head = text[:65536]
    odd = sum(1 for ch in head if ch == "\ufffd" or (ch < " " and ch not in "\t\n\r\x1b\x0c"))
    if odd > len(head) // 10:
        return "binary data, not text"
    return ""


def decode_dump(data: bytes) -> str:
    """A saved dump's text. UTF-8 unless a byte-order mark or the NUL pattern says
    UTF-16/32: Windows PowerShell's ``py-spy dump ... > dump.txt`` writes UTF-16LE, which
    read as UTF-8 is a NUL between every character and no frame at all."""
    for bom, codec in ((b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"),
                       (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"), (b"\xef\xbb\xbf", "utf-8")):
        if data.startswith(bom):
            return data[len(bom):].decode(codec, errors="replace")
    head = data[:4096]
    if len(head) >= 16:
        # Text in UTF-16 without a mark: nearly every other byte is NUL.
        even, odd = head[0::2].count(0), head[1::2].count(0)
        if odd > 0.4 * len(head) / 2 and even < 0.05 * len(head) / 2:
            return data.decode("utf-16-le", errors="replace")
        if even > 0.4 * len(head) / 2 and odd < 0.05 * len(head) / 2:
            return data.decode("utf-16-be", errors="replace")
    return data.decode("utf-8", errors="replace")


def run_whatif(samples: Sequence[Sample], thresholds: Mapping[str, Any], detect: WhatIfDetector,
               recorded: Mapping[str, Any] | None = None) -> WhatIf:
    if not samples:
        return WhatIf(dict(thresholds), 0, 0.0, None, recorded or {})
    verdict, used = detect(samples, thresholds)
    t0 = samples[0].t
    return WhatIf(dict(used), len(samples), samples[-1].t - t0, verdict, recorded or {}, t0)


def whatif_thresholds(bundle: Bundle, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The recorded thresholds with ``overrides`` applied."""
    recorded = dict(bundle.manifest.get("thresholds") or {})
    if "interval" in overrides:
        recorded.pop("gap_tolerance", None)  # recorded as the effective value for the old interval
    recorded.update({k: v for k, v in overrides.items() if v is not None})
    return recorded


def analyse(paths: Iterable[str | Path], signatures: Sequence[Signature], overrides: Mapping[str, Any] | None = None,
            whatif: WhatIfDetector | None = None) -> list[Incident]:
    """Classify every input; with ``whatif``, also re-run the detector over each bundle's samples."""
    incidents = []
    for path in expand_inputs(paths):
        src = load_source(path)
        verdicts = tuple(process_verdicts(src.series, signatures, source=src.name)) + tuple(src.undumped())
        rounds = max((len(s.dumps) for s in src.series), default=1)
        c = headline(verdicts, signatures, rounds=rounds) if src.series else None
        if c is None and src.bundle is not None:
            stored = src.bundle.manifest.get("classification")
            c = Classification.from_json(stored) if stored else None
        what = None
        if src.bundle is not None and whatif is not None:
            samples = src.bundle.samples()
            if samples:
                what = run_whatif(samples, whatif_thresholds(src.bundle, overrides or {}), whatif,
                                  src.bundle.manifest.get("verdict"))
        gpu, methods = (_gpu_readings(src.bundle), _stack_methods(src.bundle)) if src.bundle is not None else ((), {})
        incidents.append(Incident(_slim(src), c, what, verdicts, gpu, methods))
    return incidents


def _gpu_readings(bundle: Bundle) -> tuple[dict[str, Any], ...]:
    """Each GPU's utilisation, power and SM clock in ``bundle`` (``gpustate.readings``)."""
    try:
        return tuple(readings(bundle.json("gpu/state.json"), bundle.samples()))
    except Exception:  # noqa: BLE001 - a sent bundle's malformed GPU file costs only this line
        return ()


def _stack_methods(bundle: Bundle) -> dict[str, int]:
    """How many processes' stacks came by py-spy, in-process, or not at all (the manifest's
    ``stacks.methods``; an older bundle has none)."""
    methods = (bundle.manifest.get("stacks") or {}).get("methods") or []
    counts: dict[str, int] = {}
    for m in methods if isinstance(methods, list) else []:
        if isinstance(m, dict):
            counts[str(m.get("method"))] = counts.get(str(m.get("method")), 0) + 1
    return counts


def _slim(src: Source) -> Source:
    """``src`` without its bundle's bytes, which nothing reads after its analysis: a run directory
    of 30 bundles with three sparse 31 MiB logs each (368 KB on disk) held 2.9 GB while replay
    went on to the next input, and it is the sender who chooses how many there are. Only the
    verdict's kind (``Incident.to_json``) and what was left out (``render_text``) are kept."""
    if src.bundle is None:
        return src
    kind = (src.bundle.manifest.get("verdict") or {}).get("kind")
    manifest = json.dumps({"verdict": {"kind": kind if isinstance(kind, str) else None}}).encode()
    return replace(src, bundle=Bundle(src.bundle.source, src.bundle.name, {"manifest.json": manifest},
                                      list(src.bundle.left_out)))


def _interesting_threads(v: ProcessVerdict) -> list[ThreadDump]:
    """The thread that decides the process's verdict, then those other signatures matched."""
    out: list[ThreadDump] = [v.thread] if v.thread is not None else []
    for t, _, _ in v.matches:
        if len(out) >= WAIT_THREADS_PER_PROCESS:
            break
        if all(t is not o for o in out):
            out.append(t)
    return out


def thread_waits(verdicts: Sequence[ProcessVerdict]) -> list[dict[str, Any]]:
    """One entry per thread of interest of each process: ``pid``, ``rank``, ``thread``,
    ``decides`` (the thread the verdict is about) and the wait (``Wait.to_json``:
    ``category``, ``what``, ``calls``, ``frames``, ``caller``, ``cut``); a thread in its
    own code has ``category`` None. ``text`` says it in one sentence."""
    out: list[dict[str, Any]] = []
    for v in verdicts:
        for n, t in enumerate(_interesting_threads(v)):
            w = guessed_wait(t)
            name = t.name or f"thread {t.ident}"
            entry: dict[str, Any] = {"source": v.source, "pid": v.pid, "rank": v.rank, "thread": name, "decides": n == 0}
            if w is not None:
                entry.update(w.to_json())
                entry["text"] = w.describe(name)
            else:
                top = next((f for f in t.frames if not f.native), t.frames[0] if t.frames else None)
                text = f"{name} waits in no known blocking call" + (f" (innermost: {top.render()})" if top else "")
                if top is not None and t.active is False and not any(f.native for f in t.frames) and not top.is_stdlib:
                    # py-spy without --native shows Python frames only: an idle thread whose last one is
                    # the program's own sits in a C call that line made (a lock's acquire, a sleep, a read,
                    # an extension's call), which is not in the dump.
                    text += "; it sits in a C call made there, which a dump without native frames does not show (py-spy dump --native names it)"
                entry.update({"category": None, "what": None, "calls": [], "frames": [], "caller": None, "cut": False,
                              "text": text})
            out.append(entry)
    return out


def _render_waits(waits: Sequence[Mapping[str, Any]], processes: int) -> list[str]:
    if not waits:
        return []
    out = ["   waits on:"]
    for w in waits[:MAX_WAIT_LINES]:
        who = ""
        if processes > 1:
            who = f"pid {w['pid']}" if w["pid"] is not None else "pid ?"
            who += f" (rank {w['rank']})" if w["rank"] is not None else ""
            who += ": "
        out.append(f"     {who}{w['text']}")
    if len(waits) > MAX_WAIT_LINES:
        out.append(f"     ... {len(waits) - MAX_WAIT_LINES} more threads (see --json waits_on)")
    return out


def processes_overview(incidents: Sequence[Incident]) -> Overview:
    """Every process of every input in one table, and the suspect among them."""
    return overview([v for i in incidents for v in i.verdicts])


# --- aggregate -----------------------------------------------------------------------


def _tree_frames(frames: Sequence[Frame]) -> list[tuple[str, str]]:
    """Outermost first, without anonymous native addresses (they differ every run)."""
    return [f.key for f in reversed(frames) if not f.function.startswith("0x")]


#: Frames of one stack the merged call tree keeps: the outermost and the innermost halves. The
#: tree nests a level per frame, and a trainer stuck 3,000 frames deep in its own recursion made
#: `replay` of its bundle fail (text and --json) with RecursionError, "not a bundle hangwatch wrote".
CALL_TREE_DEPTH = 200


def _tree_path(frames: Sequence[Frame]) -> list[str]:
    path = [f"{fn} ({file})" for fn, file in _tree_frames(frames)]
    if len(path) <= CALL_TREE_DEPTH:
        return path
    half = CALL_TREE_DEPTH // 2
    return path[:half] + [f"[... {len(path) - 2 * half} frames ...]"] + path[-half:]


def aggregate(incidents: Sequence[Incident]) -> dict[str, Any]:
    n = len(incidents)
    sigs = Counter((i.classification.signature_id if i.classification else None) or "unknown" for i in incidents)
    frames: Counter[tuple[str, str]] = Counter()
    for i in incidents:
        if i.classification:
            frames.update(set(_tree_frames(i.classification.stack)))
    recurring = [
        {"frame": f"{fn} ({file})", "incidents": k, "of": n}
        for (fn, file), k in sorted(frames.items(), key=lambda kv: (-kv[1], kv[0]))
        if k >= 2 or n == 1
    ][:20]
    root: dict[str, Any] = {"frame": "(all)", "count": 0, "children": {}}
    for i in incidents:
        if not i.classification:
            continue
        root["count"] += 1
        node = root
        for key in _tree_path(i.classification.stack):
            node = node["children"].setdefault(key, {"frame": key, "count": 0, "children": {}})
            node["count"] += 1
    return {"incidents": n, "signatures": dict(sigs.most_common()), "recurring_frames": recurring, "call_tree": _tree_json(root)}


def _tree_json(node: dict[str, Any]) -> dict[str, Any]:
    kids = sorted(node["children"].values(), key=lambda c: (-c["count"], c["frame"]))
    return {"frame": node["frame"], "count": node["count"], "children": [_tree_json(k) for k in kids]}


def render_tree(node: Mapping[str, Any], depth: int = 0) -> list[str]:
    lines = [] if depth == 0 else [f"{node['count']:>5}  {'  ' * (depth - 1)}{node['frame']}"]
    for child in node["children"]:
        lines.extend(render_tree(child, depth + 1))
    return lines


def render_table(ov: Overview, inputs: int) -> list[str]:
    rows = [v.to_row() for v in ov.verdicts]
    out = [f"== {len(rows)} processes across {inputs} input(s)"]
    width = min(max(len(Path(r["source"]).name) for r in rows), 40)
    out.append(f"  {'SOURCE':<{width}}  {'PID':>8}  {'RANK':>4}  {'STATE':<10} {'SIGNATURE':<26} TOP FRAMES")
    for r in rows[:MAX_TABLE_ROWS]:
        pid = str(r["pid"]) if r["pid"] is not None else "?"
        rank = str(r["rank"]) if r["rank"] is not None else "-"
        frames = " < ".join(r["top_frames"][:2])
        out.append(f"  {Path(r['source']).name[:width]:<{width}}  {pid:>8}  {rank:>4}  {r['state']:<10} {r['label'][:26]:<26} {frames}")
    if len(rows) > MAX_TABLE_ROWS:
        out.append(f"  ... {len(rows) - MAX_TABLE_ROWS} more (see --json)")
    s = ov.story
    if s.suspect is not None:
        where = f"pid {s.suspect.pid}" if s.suspect.pid is not None else "a process without pid"
        rank = f", rank {s.suspect.rank}" if s.suspect.rank is not None else ""
        out.append(f"suspect: {where}{rank} ({Path(s.suspect.source).name}): {s.reason}")
    elif s.note:
        out.append(f"suspect: none here — {s.note}")
    else:
        out.append("suspect: none (no crowd waiting in a collective to differ from)")
    return out


def render_text(incidents: Sequence[Incident], agg: Mapping[str, Any], ov: Overview | None = None) -> str:
    out: list[str] = []
    for i in incidents:
        c = i.classification
        out.append(f"== {i.source.name} ({i.source.kind})")
        if c is None:
            out.append("   no stacks")
        else:
            out.append(f"   {c.summary()}")
            if c.cmdline:
                out.append(f"   process: {one_line(c.cmdline[:160])}")  # its newlines must not forge lines
            if c.suspect is not None:
                out.append(f"   suspect: {c.suspect.who()} — {c.suspect.reason}")
            out.append("   evidence:")
            out.extend(f"     {f.render()}" for f in c.evidence)
            out.extend(_render_waits(i.waits_on(), len(i.verdicts)))
            out.append(f"   advice: {c.advice}")
            if c.reference:
                out.append(f"   learned from: {c.reference}")
        if i.source.bundle is not None and i.source.bundle.left_out:
            out.append(f"   left out: {one_line(', '.join(i.source.bundle.left_out[:5]))}"
                       + (f" and {len(i.source.bundle.left_out) - 5} more" if len(i.source.bundle.left_out) > 5 else "")
                       + " (more objects than a capture writes)")
        if i.source.parse is not None:
            p = i.source.parse
            notes = "; ".join(p.notes())
            out.append(f"   read as: {len(p.processes)} process(es), {p.frames} frame(s), confidence {p.confidence}" + (f" ({notes})" if notes else ""))
        if i.stack_methods:
            out.append("   stacks by: " + ", ".join(f"{m} {n}" for m, n in sorted(i.stack_methods.items())))
        gpus = i.gpu
        if gpus:
            out.append("   gpu: " + "; ".join(describe_reading(r) for r in gpus[:8])
                       + (f" and {len(gpus) - 8} more" if len(gpus) > 8 else "") + f" ({gpus[0]['source']})")
        if i.whatif:
            out.append(f"   {i.whatif.describe()}")
        out.append("")
    if ov is not None and len(ov.verdicts) >= 2:
        out.extend(render_table(ov, len(incidents)))
        out.append("")
    n = agg["incidents"]
    out.append(f"== across {n} incident(s)")
    out.append("signatures:")
    out.extend(f"  {count:>4}  {sid}" for sid, count in agg["signatures"].items())
    if agg["recurring_frames"]:
        out.append("recurring frames (stalled threads):")
        out.extend(f"  {r['frame']} appears in {r['incidents']} of {r['of']} incidents" for r in agg["recurring_frames"])
    out.append("merged call tree of the stalled threads (count, outermost first):")
    out.extend(render_tree(agg["call_tree"]))
    # Every line is one line: a frame's function or file name is the trainer's to choose (a code
    # object's co_name, compile()'s filename), and one with a newline forged a line of its own
    # ("== forged (bundle)") in the evidence, the recurring frames and the call tree.
    return "\n".join(one_line(line) for line in out) + "\n"
