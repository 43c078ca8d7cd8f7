"""Base utilities that every room uses and that import nothing else of archplace: the error
kinds (``errors``), the declared option fields and their checks (``options``, ``fields``), the
ranges (``limits``) and units (``units``), name registries (``registry``), and the process-pool
plumbing of searches (``executor``, ``lifetime``, ``quiet``)."""
