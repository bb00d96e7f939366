"""A TCP peer that accepts connections and never answers (started by hw.silent_server())."""
import socket, sys, time, select
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(16)
print(s.getsockname()[1], flush=True)
conns = []
end = time.time() + 150
while time.time() < end:
    r, _, _ = select.select([s], [], [], 1)
    if r:
        c, _ = s.accept(); conns.append(c)   # accept, never read, never answer
