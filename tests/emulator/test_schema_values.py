"""A schema's check is compiled once, safely from many threads: the emulator serves each call
on its own thread, and the first calls of a method arrive together (two `up`s, an `up` and a
`down`). A thread that asks for a schema another one is compiling waits for it, and never uses
a check that is not finished."""

from __future__ import annotations

import copy
import threading

from podmanager.emulator import discovery, schema_values

BODY = {"name": "vm", "bogus": 1}


class _CountingCache(dict):
    """The published checks, counting the lookups of one key (a thread asking for the schema)."""

    def __init__(self, key: tuple, asked: threading.Semaphore):
        super().__init__()
        self.key, self.asked = key, asked

    def get(self, key, default=None):
        if key == self.key:
            self.asked.release()
        return super().get(key, default)


def test_threads_asking_for_a_schema_while_another_compiles_it_get_its_answer(monkeypatch):
    # A copy: its schemas are new to the cache, as Compute's are to a fresh emulator.
    schemas = copy.deepcopy(discovery.api("compute.v1").schemas)
    others = 4
    asked = threading.Semaphore(0)
    monkeypatch.setattr(schema_values, "_CACHE", _CountingCache((id(schemas), "Instance", False), asked))
    compile_schema, paused = schema_values._compile, threading.Event()

    def compile_after_the_others_asked(*args, **kwargs):
        if not paused.is_set():  # the first thread, once inside the compilation: let the others ask
            paused.set()
            for _ in range(1 + others):  # its own lookup, then each other thread's
                assert asked.acquire(timeout=60)
        return compile_schema(*args, **kwargs)

    monkeypatch.setattr(schema_values, "_compile", compile_after_the_others_asked)
    answers: list[object] = []

    def check() -> None:
        try:
            answers.append(schema_values.problem(schemas, "Instance", BODY, "instance", output=False))
        except Exception as error:  # noqa: BLE001 - what the emulator's serving thread would have died of
            answers.append(error)

    first = threading.Thread(target=check)
    first.start()
    assert paused.wait(timeout=60)
    rest = [threading.Thread(target=check) for _ in range(others)]
    for thread in rest:
        thread.start()
    for thread in [first, *rest]:
        thread.join(timeout=60)
    expected = schema_values.problem(schemas, "Instance", BODY, "instance", output=False)
    assert expected is not None and "bogus" in expected[0]
    assert answers == [expected] * (1 + others)
