"""What `up` prints as its events come (cli/up.py::EventFeed): a thousand slices are a few lines
and a count."""

from __future__ import annotations

from types import SimpleNamespace

from podmanager.cli.up import SAME_KIND_SHOWN, EventFeed


def test_a_thousand_slices_print_a_few_lines_and_a_count():
    shown: list[str] = []
    feed = EventFeed(SimpleNamespace(update=lambda text: None), show_event=lambda e: shown.append(e.message))
    for i in range(1000):
        feed(SimpleNamespace(kind="slice_creating", message=f"creating c-s{i}"))
    feed(SimpleNamespace(kind="slices_ready", message="all READY"))
    assert shown == [f"creating c-s{i}" for i in range(SAME_KIND_SHOWN)] + ["all READY"]
