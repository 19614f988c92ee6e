"""Layer 7: studies over the engine. Modules, in the order they may import each other:
`sharing` (jobs together vs alone), `resilience` (failure sets, reliability what-if),
`sensitivity` (which links to upgrade), `analyze` (the one loop for every fabric kind)."""
