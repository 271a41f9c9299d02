"""The shared core: errors, clock, paths, the accelerator catalog, the cluster spec, the workload
and the small typed records every layer passes around. Imports nothing else of podmanager."""
