"""archplace.search."""
