"""Layer 5: the engine. Modules, in the order they may import each other: `plan` (memory
model and up-front decisions), `phase` (THE phase program and its host entry), `batch`
(failure sets: the same program mapped over masks)."""
