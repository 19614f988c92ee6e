"""Layer 8: reports. Render results as rich tables fitted to the terminal (`layout`, `tables`,
`topo`; a whole report or sweep on a console: `console`), a sweep's rows and CSV (`sweep`),
JSON (`json`) and PNG figures (`plots`, matplotlib deferred until a figure is drawn); never
import JAX, so `fabricjax topo` and `import fabricjax.report` stay instant."""
