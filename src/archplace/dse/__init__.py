"""archplace.dse: the design-space exploration (``archplace search``): designs of a space, their
plans and objectives, the strategies that choose them and the result store."""
