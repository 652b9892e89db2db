"""Weights at serving precision: parameter counts from the config, bytes per precision, and exact
sizes from a checkpoint's own tensor headers.

* ``params.count_params(spec)``: total, active and per-component parameters.
* ``precision.weight_precision(name)`` / ``precision.estimate_weights(count, precision)``.
* ``sources.from_safetensors`` / ``from_hub`` / ``from_gguf`` / ``measured``: exact or given sizes.
* ``report.weights_report(ref)``: everything ``kvbudget weights`` shows.

Every size carries ``provenance`` ("exact", "measured" or "computed") and a one-line ``basis``.
"""
