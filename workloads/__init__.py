"""Example JAX programs run by podmanager (also runnable as plain scripts)."""
