"""Asking a test's doubling service (its program returns each input times two) through an
address a test was given, as a user's client would."""

from __future__ import annotations

import json
import urllib.request


def answers_doubled(endpoint: str) -> bool:
    """Whether `endpoint`'s /predict doubles 21 now; False while the replica still loads (a 503
    after the queue's timeout) or the router is not yet up."""
    try:
        asked = urllib.request.Request(f"{endpoint}/predict", data=b'{"inputs": 21}',
                                       headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(asked, timeout=30) as answer:
            return json.loads(answer.read()) == {"outputs": 42}
    except OSError:
        return False
