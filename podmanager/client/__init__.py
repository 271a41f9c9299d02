"""What runs only on the user's machine: a cluster whose controller is a VM reached through the
channel, that VM made and removed, and the forwards; never Ray or JAX."""
