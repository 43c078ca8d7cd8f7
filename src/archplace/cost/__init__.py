"""archplace.cost."""
