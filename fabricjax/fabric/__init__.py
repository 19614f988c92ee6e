"""Layer 2: fabrics on the host (numpy, networkx; no JAX).

Modules, in the order they may import each other: `spec` (what a fabric config must
satisfy), `clos` (the two-tier multi-plane Clos by arithmetic), `graph` (fat trees and graph
files: stored links and K shortest candidate paths), `paths` (Clos path slots), `build` (any
fabric from a scenario, and its summary), `failures` (failure sets as id lists), `bom`
(bill of materials).
"""
