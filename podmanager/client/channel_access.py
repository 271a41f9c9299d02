"""Which laptops may reach a cluster's controller: the callers its channel rule admits
(`pm-<cluster>-channel`, each one address; `channel_callers.py` reads them) added and revoked
with the user's Compute permission (docs/channel.md, "Reaching the controller from another laptop").

`access_add` learns this machine's public address from the controller itself: a short
opening (`pm-<cluster>-channel-open`: the channel's port, from anywhere, to the controller
alone) lets it ask the controller, over the pinned TLS and with the cluster's token, where the
request came from; the opening is deleted at once (also on failure, and a crashed one's by the
next `access add`), and the address is added to the rule as one /32. Nothing outside Google
Cloud is asked, and the rule never admits more than the listed addresses."""

from __future__ import annotations

from podmanager.channel.errors import ChannelError
from podmanager.client.channel_callers import (
    ChannelAccess,
    channel_rule_of,
    controller_spec,
    networks_of,
)
from podmanager.client.channel_client import ChannelClient
from podmanager.client.controller_machine import cloud_credentials
from podmanager.client.pinned import ClientCredentials
from podmanager.cloud import errors as cloud_errors
from podmanager.cloud.gcp.compute import ComputeNetworks
from podmanager.cloud.gcp.controller_vm import (
    admitted_callers,
    caller_range,
    opening_rule_name,
)
from podmanager.core.clock import poll_until
from podmanager.core.errors import SpecError
from podmanager.core.network_names import network_project

ANYWHERE = "0.0.0.0/0"
OPENING_S = 90.0  # the longest the opening stays (a firewall change takes seconds to hold)
ASK_EVERY_S = 1.0


def _delete_if_there(networks: ComputeNetworks, name: str) -> None:
    try:
        networks.delete_firewall(name)
    except cloud_errors.NotFoundError:
        pass


def _asked(credentials: ClientCredentials) -> str | None:
    """This machine's address as the controller sees it; None while the controller cannot be reached."""
    try:
        with ChannelClient(credentials, explain_unreachable=False) as client:
            return client.caller()
    except ChannelError:
        return None


def access_add(name: str, *, project: str | None = None, dry_run: bool = False) -> ChannelAccess:
    """This machine's public address, as the controller sees it, added to the channel rule."""
    spec = controller_spec(name, project=project, dry_run=dry_run)
    credentials = cloud_credentials(spec)
    with networks_of(spec) as session:
        networks = session.in_project(network_project(spec))
        rule = channel_rule_of(spec, networks)
        opening = rule.model_copy(update={"name": opening_rule_name(name), "source_ranges": [ANYWHERE]})
        _delete_if_there(networks, opening.name)  # an earlier add's that did not finish
        try:
            networks.create_firewall(opening)
            seen = poll_until(lambda: _asked(credentials), timeout_s=OPENING_S, interval_s=ASK_EVERY_S,
                              what=f"the controller of {name} to answer through {opening.name}")
        finally:
            _delete_if_there(networks, opening.name)
        address = caller_range(seen)
        rule = channel_rule_of(spec, networks)  # read again: another laptop may have changed it meanwhile
        admitted = admitted_callers(rule)
        if address not in admitted:
            admitted = admitted + [address]
            networks.patch_firewall_sources(rule.name, admitted)
    return ChannelAccess(name, rule.name, admitted, added=address)


def access_revoke(name: str, address: str, *, project: str | None = None, dry_run: bool = False) -> ChannelAccess:
    """`address` removed from the channel rule's callers; refused (exit 2, nothing changed) when it
    is not one of them, or is the last (a rule with no source would admit everyone)."""
    try:
        wanted = caller_range(address if "/" in address else f"{address}/{128 if ':' in address else 32}")
    except SpecError as bad:
        raise SpecError(f"ADDR: {bad.message}", hint=bad.hint) from None
    spec = controller_spec(name, project=project, dry_run=dry_run)
    with networks_of(spec) as session:
        networks = session.in_project(network_project(spec))
        rule = channel_rule_of(spec, networks)
        admitted = admitted_callers(rule)
        if wanted not in admitted:
            raise SpecError(f"ADDR: {address} is not a caller of {rule.name} (it admits {', '.join(admitted)})",
                            hint=f"'podmanager access -c {name}' lists them.")
        if admitted == [wanted]:
            raise SpecError(f"ADDR: {address} is the last caller {rule.name} admits; a rule with no source "
                            "would admit every address",
                            hint=f"Add another first ('podmanager access add -c {name}' on that machine), "
                                 f"or 'podmanager down -c {name}' removes the cluster and its rule.")
        kept = [a for a in admitted if a != wanted]
        networks.patch_firewall_sources(rule.name, kept)
    return ChannelAccess(name, rule.name, kept, revoked=wanted)
