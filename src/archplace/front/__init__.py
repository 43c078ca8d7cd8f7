"""The front door: where a user's request comes in and is resolved, once.

* :mod:`archplace.front.api`: the keyword functions behind ``import archplace`` (real
  signatures and docstrings);
* :mod:`archplace.front.specs`: the typed run specs (``Plan``, ``PlanSpace``, ``ModelSpec``,
  ``HardwareSpec``, ``ClusterSpec``, ``SearchSpec``, the run files), checked when made;
* :mod:`archplace.front.app`: the one resolver that turns specs into a traced model, a chip and a
  cluster and calls the engine;
* the rest serves them: reading input files (``inputs``), writing and reading result stores
  (``outputs``, ``stored_results``, ``searches``), layer-graph files and plans
  (``layer_graph_file``, ``layer_graphs``), and the example configs (``config_examples``).

Imports go one way: the CLI (``archplace.cli``) imports the front door; the front door imports
the engine (``workload``, ``hw``, ``cost``, ``scheduling``, ``placement``, ``dse``) and the base
utilities (``archplace.base``), neither of which imports the front door
(``tests/test_layering.py``). The rooms around them (``reporting``, ``calibration``,
``validation``, ``schemas``) may resolve runs through the front door.
"""
