"""Helper the live-hang scenarios share (copied next to each one as hw.py).

A scenario calls ``hw.ready(role)`` just before it hangs: that arms faulthandler
(SIGUSR1 writes all threads to a file; ``dump_traceback_later`` writes them once
after ``later`` seconds) and names the pid to dump for ``role`` in a ``ROLE.target``
file the runner polls. Everything goes under ``$LIVE_HANG_RUN``, the runner's
private directory for this scenario.
"""
import faulthandler
import os
import signal
import sys
import time

RUN = os.environ["LIVE_HANG_RUN"]
LIMIT = 150            # hard bound on every scenario process (SIGALRM's default action kills)
signal.alarm(LIMIT)
_keep = []
_later = None   # (pid, time) of the pending dump_traceback_later


def path(name):
    """A path in the scenario's private run directory (lock files, databases, fifos)."""
    return os.path.join(RUN, name)


def arm(later=2.0):
    global _later
    pid = os.getpid()
    signal.alarm(LIMIT)
    f = open(path(f"{pid}.fh"), "w")
    _keep.append(f)
    faulthandler.register(signal.SIGUSR1, file=f, all_threads=True)
    if later and _later and _later[0] != pid and time.time() < _later[1] + 1.0:
        later = None   # inherited an un-fired timer across fork: re-arming would hang on its lock
    if later:
        _later = (pid, time.time() + later)
        g = open(path(f"{pid}.fhlater"), "w")
        _keep.append(g)
        faulthandler.dump_traceback_later(later, repeat=False, file=g)


def ready(role="main", pid=None, arm_fh=True, later=2.0):
    """Name ``pid`` (default: this process) as ``role``'s process; arm faulthandler first."""
    if arm_fh:
        arm(later)
    pid = pid or os.getpid()
    target = path(f"{role}.target")
    tmp = f"{target}.tmp{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT)
        os.write(fd, str(pid).encode())
        os.close(fd)
        os.rename(tmp, target)
    except OSError:
        pass


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def silent_server():
    """Start a child process that accepts TCP connections and never answers; return its port."""
    import subprocess
    p = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peer.py")],
                         stdout=subprocess.PIPE)
    port = int(p.stdout.readline())
    _keep.append(p)
    return port
