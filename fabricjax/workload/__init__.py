"""Layer 2: workloads on the host (numpy; no JAX).

Modules, in the order they may import each other: `flows` (Flows, Phase, Collective),
`traffic` (traffic-matrix files in and out), `collectives` (the builders: rings, trees,
all-to-all, ...), `build` (a scenario's items and jobs, placed).
"""
