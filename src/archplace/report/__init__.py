"""archplace.report."""
