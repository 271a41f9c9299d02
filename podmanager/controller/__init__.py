"""The controller's side: the Ray head, the fleet of host agents, the host monitor, the
software every VM is pinned to, the staged wheel and the startup script VMs boot with."""
