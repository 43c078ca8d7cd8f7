"""archplace.placement."""
