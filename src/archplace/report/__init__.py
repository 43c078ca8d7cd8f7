"""archplace.report: rendering of results (rich tables, design-space plots, Gantt charts); nothing
here computes a figure."""
