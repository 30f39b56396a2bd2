"""The performance model: model and GPU presets, the modelled engine's configuration, the
roofline step cost and chunked-prefill arithmetic. A leaf package shared by the simulator
(``simengine``) and the diagnosis (``diagnose``); it imports only ``workloads.errors``."""
