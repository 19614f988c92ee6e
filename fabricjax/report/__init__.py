"""Layer 8: reports. Render results as rich tables (`tables`, `topo`), JSON (`json`) and
PNG figures (`plots`, matplotlib deferred until a figure is drawn); never import JAX, so
`fabricjax topo` and `import fabricjax.report` stay instant."""
