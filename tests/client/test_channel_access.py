"""`podmanager access revoke`'s bad input: refused before anything is asked of the cloud (the
verbs' behaviour on a live cluster is in tests/end_to_end/test_namespace_up.py)."""

from __future__ import annotations

import pytest

from podmanager import api
from podmanager.core.errors import SpecError


@pytest.mark.parametrize("address", ["10.0.0.0/8", "0.0.0.0/0", "not-an-address"])
def test_revoke_of_anything_but_one_address_is_refused_naming_addr(address, monkeypatch) -> None:
    def no_cloud(*args, **kwargs):
        raise AssertionError("the cloud was asked")

    monkeypatch.setattr("podmanager.client.channel_access.controller_spec", no_cloud)
    with pytest.raises(SpecError) as refused:
        api.access_revoke("c1", address, dry_run=True)
    assert refused.value.exit_code == 2 and refused.value.message.startswith("ADDR: ")
