"""archplace.hw: the hardware (``archplace hardware``): accelerators, clusters, their area and power
models, the bundled presets and the design spaces."""
