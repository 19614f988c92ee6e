"""Layer 2: workloads on the host (numpy; no JAX).

Modules, in the order they may import each other: `flows` (Flows, Phase, Collective, the
StepPlan of a training step), `traffic` (traffic-matrix files in and out), `et` (the Chakra
execution-trace format), `collectives` (the builders: rings, trees, all-to-all, process
groups, ...), `training` (a parallelism plan as a step of concurrent collectives), `chakra`
(Chakra traces as the same), `build` (a scenario's items and jobs, placed).
"""
