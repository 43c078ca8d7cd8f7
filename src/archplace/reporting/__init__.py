"""archplace.reporting: results shown to people. ``pages`` gathers what each HTML report shows
(``archplace report``, ``--report``) from a store or a run; the other modules render only (rich
tables, CSV, design-space plots, Gantt charts, the self-contained HTML page): nothing here
computes a figure of the model."""
