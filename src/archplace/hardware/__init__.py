"""archplace.hardware."""
