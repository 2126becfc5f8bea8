"""The soak's parts: the recorded history, the cluster of real processes, the workload and faults."""
