"""Layer 3: the jitted numerical core (JAX). Modules, in the order they may import each
other: `maxmin` (loads, utilisation statistics, max-min rates, the phase result),
`incidence` (slots -> link ids for every fabric kind; the BCOO path-link matrix),
`progressive` (flow-level completion), `aggregate` (all-to-all classes), `gradients`
(sensitivity of P100 and time to link capacities)."""
