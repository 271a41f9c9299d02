"""Slices and hosts named as the user sees them: index, slice-N, node name; SLICE/WORKER."""

import pytest

from podmanager.core import selectors
from podmanager.core.errors import SpecError


@pytest.mark.parametrize("text", ["1", "slice-1", "demo-s1", " demo-s1 "])
def test_a_slice_by_index_label_or_node_name(text):
    assert selectors.parse_slice(text, "demo", flag="--slice") == 1


def test_a_node_name_of_another_cluster_is_refused_with_the_right_names():
    with pytest.raises(SpecError, match=r"--slice: other-s0 is not a node of cluster demo; its nodes are demo-s0"):
        selectors.parse_slice("other-s0", "demo", flag="--slice")


@pytest.mark.parametrize("text", ["", "s0", "slice-", "-1", "1.5", "demo"])
def test_what_is_not_a_slice_names_the_flag_and_the_forms(text):
    with pytest.raises(SpecError, match=r"^--slice: .* is not a slice; use 0, slice-0 or the node name demo-s0"):
        selectors.parse_slice(text, "demo", flag="--slice")


def test_a_list_of_slices_mixes_forms_and_drops_repeats():
    assert selectors.parse_slices("1,slice-0,demo-s2,1", "demo", flag="--slices") == [1, 0, 2]


@pytest.mark.parametrize("text", ["0/1", "slice-0/1", "slice-0/host-1", "demo-s0/1", "demo-s0/host-1"])
def test_a_host_in_every_form(text):
    assert selectors.parse_host(text, "demo", flag="--host") == (0, 1)


@pytest.mark.parametrize("text", ["0", "0/", "/1", "0/1/2", "slice-0-host-1"])
def test_what_is_not_a_host_names_the_flag_and_an_example(text):
    with pytest.raises(SpecError, match=r"^--host: .* is not a host; use SLICE/WORKER, e.g. 0/1"):
        selectors.parse_host(text, "demo", flag="--host")
