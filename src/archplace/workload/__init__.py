"""archplace.workload."""
