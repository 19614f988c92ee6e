"""Layer 0: what every other layer may use. Errors (`errors`), units (`units`), the one
status flag set (`status`), output files written atomically (`output`) and the devices JAX
computes on (`devices`). Nothing here imports JAX at import time."""
