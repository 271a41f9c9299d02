"""Compute Engine's list `filter` as the emulator reads it: the grammar compute.v1's own
definition of the parameter states (several expressions each within parentheses, the `=` and the
regular-expression dialects never mixed), refused otherwise with Compute's 400."""

from __future__ import annotations

import pytest

from podmanager.cloud import errors as cloud_errors
from podmanager.emulator.rulebook import compute_list_filter

FIELDS = {"name": "c-controller", "status": "RUNNING", "labels.podmanager-cluster": "c",
          "labels.podmanager-role": "controller"}


def matches(text: str, fields: dict[str, str] = FIELDS) -> bool:
    return compute_list_filter(text).matches(fields.get)


@pytest.mark.parametrize("text", [
    "",
    'labels.podmanager-cluster = "c"',
    "labels.podmanager-cluster = c",
    '(labels.podmanager-cluster = "c") (labels.podmanager-role = "controller")',
    '(labels.podmanager-cluster = "c") AND (labels.podmanager-role = "controller")',
    '(labels.podmanager-cluster = "x") OR (name = "c-controller")',
    "labels.podmanager-role:*",
    'name != "other"',
    "name eq c-.*",
    "name eq 'c-contr.*'",
    '(name eq "c-.*") (status ne "STOPP.*")',
])
def test_filters_by_the_grammar_match(text):
    assert matches(text)


@pytest.mark.parametrize("text", [
    '(labels.podmanager-cluster = "c") (labels.podmanager-role = "worker")',
    "labels.podmanager-owner:*",
    "name eq c-",  # a regular expression matches the whole field
    '(name eq "c-.*") AND (status eq "STOPP.*")',
])
def test_filters_by_the_grammar_that_do_not_match(text):
    assert not matches(text)


@pytest.mark.parametrize("text", [
    # Several expressions without parentheses: what podmanager sent before, refused by Compute.
    'labels.podmanager-cluster = "c" AND labels.podmanager-role = "controller"',
    'labels.podmanager-cluster = "c" labels.podmanager-role = "controller"',
    '(labels.podmanager-cluster = "c") labels.podmanager-role = "controller"',
    '(labels.podmanager-cluster = "c"',
    '(labels.podmanager-cluster = "c") AND',
    '(name eq "c-.*") (labels.podmanager-role = "controller")',  # the two dialects mixed
    "labels.podmanager-cluster = 'c'",  # single quotes are the regular expressions' only
    "labels.podmanager-cluster",
])
def test_anything_else_is_compute_s_400(text):
    with pytest.raises(cloud_errors.InvalidRequestError, match="Invalid list filter expression"):
        compute_list_filter(text)
