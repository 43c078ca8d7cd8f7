"""Former home of the layer-DAG planner, now split by concern; kept only so that existing imports
(``archplace.api``) keep working until they name the new modules, then to be removed.

* :mod:`archplace.placement.layer_graph`: the DAG type (:class:`LayerGraph`, downsets, cut bytes,
  linearization);
* :mod:`archplace.placement.layer_graph_file`: the YAML/JSON layer-graph file loader;
* :mod:`archplace.placement.downset_dp`: Piper's dynamic program over downsets (:func:`dag_plan`).
"""

from __future__ import annotations

from archplace.placement.downset_dp import MAX_STAGE_PAIRS, TIE_RTOL, dag_plan
from archplace.placement.layer_graph import MAX_DOWNSETS, LayerGraph, cut_bytes, downsets, linearize
from archplace.placement.layer_graph_file import (
    layer_graph_from_dict,
    load_layer_graph,
    load_layer_graph_file,
)

__all__ = ["MAX_DOWNSETS", "MAX_STAGE_PAIRS", "TIE_RTOL", "LayerGraph", "cut_bytes", "dag_plan", "downsets",
           "layer_graph_from_dict", "linearize", "load_layer_graph", "load_layer_graph_file"]
