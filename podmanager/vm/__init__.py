"""What a TPU VM runs: joining the cluster's Ray at boot, the host agent that owns the chips,
a run's setup and its workload process, the probe, notices and boot stages. Nothing here
imports the controller's side."""
