"""archplace."""
