"""The shared fakes (``tests/fakes.py``) keep the real interfaces they imitate: the same public
methods with the same parameters, so a test over a fake cannot pass against a method the real
code does not have or calls otherwise."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from fakes import (FakeClock, FakeJournal, FakeProbe, FakeProcessTree, FakeTrainer, FakeTree, MemoryStore,
                   fake_supervisor)

from hangwatch.contract.journal import Journal
from hangwatch.supervisor.cohort.store import Store, StoreError
from hangwatch.supervisor.contain.tree_ops import LocalTree, Trainer, TreeOps
from hangwatch.supervisor.watch.probes import GpuProbe
from hangwatch.supervisor.watch.proctree import ProcessTree


def _methods(cls: type) -> dict[str, list[tuple[str, object, bool]]]:
    """Each public method's parameters: name, kind, whether it has a default."""
    return {name: [(p.name, p.kind, p.default is not p.empty) for p in inspect.signature(fn).parameters.values()]
            for name, fn in vars(cls).items() if inspect.isfunction(fn) and not name.startswith("_")}


@pytest.mark.parametrize("real, fake", [
    (TreeOps, FakeTree),
    (Trainer, FakeTrainer),
    (GpuProbe, FakeProbe),
    (Store, MemoryStore),
], ids=lambda c: c.__name__)
def test_a_fake_has_every_method_of_the_protocol_it_imitates_with_the_same_parameters(real, fake):
    real_methods, fake_methods = _methods(real), _methods(fake)
    assert real_methods, f"{real.__name__} lists no methods"
    for name, params in real_methods.items():
        assert name in fake_methods, f"{fake.__name__} lacks {name}"
        assert fake_methods[name] == params, f"{fake.__name__}.{name} is called otherwise than {real.__name__}'s"


@pytest.mark.parametrize("real, fake, names", [
    (LocalTree, FakeTree, ["launch", "exit_code", "watch", "sample", "describe", "forward", "kill", "kill_groups"]),
    (Journal, FakeJournal, ["append"]),
    (ProcessTree, FakeProcessTree, ["members"]),
], ids=lambda c: c.__name__ if isinstance(c, type) else "methods")
def test_a_fake_takes_the_same_parameters_as_the_real_class(real, fake, names):
    real_methods, fake_methods = _methods(real), _methods(fake)
    for name in names:
        assert fake_methods[name] == real_methods[name], f"{fake.__name__}.{name} differs from {real.__name__}'s"


def test_the_fakes_hold_the_attributes_of_the_protocols():
    assert set(inspect.get_annotations(Trainer)) <= set(inspect.get_annotations(FakeTrainer))
    assert set(inspect.get_annotations(GpuProbe)) == {"name"} and isinstance(FakeProbe.name, str)


def test_the_fake_journal_refuses_an_event_the_real_one_refuses(tmp_path: Path):
    with pytest.raises(ValueError):
        Journal(tmp_path / "journal.jsonl", "run").append("no_such_event")
    with pytest.raises(ValueError):
        FakeJournal().append("no_such_event")
    journal = FakeJournal()
    assert journal.append("kill", attempt=1) == {"event": "kill", "attempt": 1} and journal.events == ["kill"]


def test_the_fake_clock_moves_only_when_asked_and_records_each_sleep():
    clock = FakeClock(10.0)
    assert clock() == 10.0 and clock() == 10.0
    assert clock.sleep(2.5) is True and clock.sleep(0) is True  # even sleep(0) moves time a little
    clock.advance(100.0)
    assert clock.sleeps == [2.5, 0] and clock() == pytest.approx(112.501)


def test_the_memory_store_is_down_as_a_lost_node_0_is():
    store = MemoryStore()
    assert store.compare_set("k", "", "a") == "a" and store.compare_set("k", "", "b") == "a"
    assert store.add("n") == 1 and store.add("n", 2) == 3
    store.down = True
    with pytest.raises(StoreError):
        store.get("k")


def test_the_fake_tree_runs_a_script_of_attempts_through_the_real_runner(tmp_path: Path):
    sup, tree, clock, capture = fake_supervisor(tmp_path, ["crash", "wedge", "train"], max_restarts=5)
    assert sup.run() == 0
    assert len(tree.launched) == 3 and tree.kills >= 1 and len(capture.requests) == 1
    assert clock.sleeps and all(s >= 0 for s in clock.sleeps)


def test_no_test_module_imports_another():
    """Shared fakes and helpers live in their own modules (this folder's ``fakes``, ``waiting``, a
    folder's ``*_helpers``), imported by name: a test module imported by others ran its tests twice
    and tied them to its fixtures' shape."""
    tests = Path(__file__).resolve().parent
    pattern = re.compile(r"^\s*(from|import)\s+(tests(\.|\s)|(\w+\.)*test_\w+)", re.M)
    offenders = [f"{path.relative_to(tests)}: {m.group(0).strip()}"
                 for path in sorted(tests.rglob("*.py")) for m in pattern.finditer(path.read_text())]
    assert not offenders, offenders
