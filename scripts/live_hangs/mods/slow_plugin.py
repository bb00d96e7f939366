"""Imported by import_lock: its top level blocks, holding the per-module import lock."""
import threading
_registered = threading.Event()
_registered.wait(140)                        # waits for a registration that never happens
