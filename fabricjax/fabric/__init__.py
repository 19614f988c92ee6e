"""Layer 2: fabrics on the host (numpy, networkx; no JAX).

Modules, in the order they may import each other: `spec` (what a fabric config must
satisfy, sizes in closed form), `clos` (the two-tier multi-plane Clos by arithmetic),
`graphfile` (GraphML and edge-list files read and checked), `fattree` (k-ary fat trees as
graphs), `ksp` (K shortest candidate paths on a graph fabric), `graph` (`GraphFabric`: fat
trees and graph files as stored links), `paths` (Clos path slots), `build` (any fabric from
a scenario, and its summary), `failures` (failure sets as id lists), `bom` (bill of
materials).
"""
