"""Running one attempt of a workload: the launch environment, the gang of host processes,
and the run's logs."""
