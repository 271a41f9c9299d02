"""The simulated network of a dry run (issue 47): every simulated machine on its own address,
behind Google Cloud's firewall.

- `model.py`: the project's VPC as the emulator's Compute records describe it (pure).
- `firewall.py`: the project's firewall rules as each VM's ordered rule set (pure).
- `nft.py`: those rule sets, and the VPC's edge and the home router, as nftables scripts (pure).
- `fabric.py`: the VPC made real on Linux as root: namespaces, bridges, veth pairs, NAT, nftables.
- `names.py`: the per-emulator prefix every made object carries, and the cleanup of leftovers.
- `sockets.py`: a socket opened inside a namespace, from this process.
- `vm_network.py`: the emulator's namespace mode: the simulated VMs on that network.

Only the emulator imports this folder. The VMs run in it in the namespace mode only: see docs/dry-run.md.
"""
