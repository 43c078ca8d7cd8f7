"""archplace.scheduling: a layer's operators scheduled on the chip's cores (``archplace schedule``):
the list scheduler, CP-SAT and MILP formulations, their bounds."""
