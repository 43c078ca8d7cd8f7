"""archplace.schedule."""
