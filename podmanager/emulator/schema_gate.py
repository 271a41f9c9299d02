"""The emulator's one schema check per request, REST and gRPC alike, and its switches.

Every request the emulator serves is checked against Google's API definitions
(`validation.py`) before a handler sees it, and refused as Google refuses it. Two switches, set
in the environment of the process that starts the emulator (a background emulator inherits them):
- `PODMANAGER_EMULATOR_STRICT=1` (the tests' conftest sets it): every answer is checked too,
  against the method's response schema; one that breaks it is logged and replaced by an
  INTERNAL error naming the problem, so the client fails loudly.
- `PODMANAGER_EMULATOR_SCHEMA_LOG=FILE`: one JSON line per request checked, appended
  (`{"protocol", "method", "call", "refused", "answer", "check_us"}`): what a test reads to see
  every request a dry run made and that none was refused, and what the checks cost.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from podmanager.emulator import validation
from podmanager.emulator.discovery import Method
from podmanager.emulator.validation import Refusal

log = logging.getLogger(__name__)

STRICT_ENV = "PODMANAGER_EMULATOR_STRICT"
LOG_ENV = "PODMANAGER_EMULATOR_SCHEMA_LOG"
REMEMBERED_ANSWERS = 4096  # answers found good, by digest: a poll answered the same again is not checked again


class Gate:
    """The check at the emulator's doors: `strict` also checks answers; `record_to` appends a line a request."""

    def __init__(self, *, strict: bool = False, record_to: Path | None = None):
        self.strict = strict
        self.record_to = record_to
        self._lock = threading.Lock()
        self._good: OrderedDict[bytes, None] = OrderedDict()

    @classmethod
    def from_environment(cls) -> Gate:
        record = os.environ.get(LOG_ENV)
        return cls(strict=os.environ.get(STRICT_ENV, "") not in ("", "0"), record_to=Path(record) if record else None)

    def log_check(self, protocol: str, method: Method | None, call: str, refused: Refusal | None,
               answer: str | None = None, spent_s: float = 0.0) -> None:
        """One line of the record (if it is kept): the call, what was refused or wrong with its
        answer, and the CPU time its checks took on the serving thread (waits left out), in µs."""
        if self.record_to is None:
            return
        line = json.dumps({"protocol": protocol, "method": method.id if method else None, "call": call,
                           "refused": refused.message if refused else None, "answer": answer,
                           "check_us": round(spent_s * 1e6)})
        with self._lock, self.record_to.open("a", encoding="utf-8") as out:
            out.write(line + "\n")

    def answer_problem(self, method: Method, data: bytes, check: Callable[[], str | None]) -> str | None:
        """`check()` of an answer whose bytes are `data`, unless the same answer to the same
        method was found good before (the check depends on nothing else)."""
        digest = hashlib.blake2b(method.id.encode() + b"\0" + data, digest_size=16).digest()
        with self._lock:
            if digest in self._good:
                self._good.move_to_end(digest)
                return None
        found = check()
        if found is None:
            with self._lock:
                self._good[digest] = None
                if len(self._good) > REMEMBERED_ANSWERS:
                    self._good.popitem(last=False)
        return found

    def answer_failed(self, method: Method, call: str, problem: str) -> str:
        """An answer broke the schema (strict mode): logged and recorded; the message the client gets."""
        message = f"the emulator's answer to {method.id} breaks Google's schema ({method.api.name} " \
                  f"revision {method.api.revision}): {problem}"
        log.error("%s: %s", call, message)
        return message

    # ------------------------------------------------------------------ REST (rest.py's one door)

    def rest_request(self, verb: str, url: str, body: bytes) -> Checked:
        """The request checked: its method, and Google's error body if it is refused."""
        started = time.thread_time()
        method, refused = validation.rest_call(verb, url, body)
        checked = Checked(method, f"{verb} {url}", refused.error_body() if refused else None,
                          time.thread_time() - started)
        if refused is not None:
            self.log_check("rest", method, checked.call, refused, spent_s=checked.spent_s)
        return checked

    def rest_answer(self, checked: Checked, status: int, body: bytes, content_type: str) -> dict[str, Any] | None:
        """The answer to a request let through, recorded; in strict mode checked first, and
        Google's error body returned to replace it if it breaks the schema."""
        method = checked.method
        assert method is not None  # a request without a method is refused
        if not self.strict:
            self.log_check("rest", method, checked.call, None, spent_s=checked.spent_s)
            return None
        started = time.thread_time()
        problem = (self.answer_problem(method, b"%d\0%s" % (status, body),
                                       lambda: validation.answer_problem(method, status, body, content_type))
                   if content_type.startswith("application/json")
                   else validation.answer_problem(method, status, body, content_type))  # bytes: nothing to walk
        self.log_check("rest", method, checked.call, None, problem, checked.spent_s + time.thread_time() - started)
        if problem is None:
            return None
        return Refusal(500, "INTERNAL", self.answer_failed(method, checked.call, problem)).error_body()


@dataclass(frozen=True)
class Checked:
    """A REST request as the gate let it through or refused it."""

    method: Method | None
    call: str  # "VERB /path?query", for the record and the log
    refused: dict[str, Any] | None  # Google's error body, to answer instead
    spent_s: float  # the CPU time checking it took
