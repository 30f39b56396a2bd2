"""Stand-in for ``sgl_kernel.scalar_type``: refuses to import, so SGLang's own
``except ImportError`` (``srt/layers/quantization/utils.py``, ``get_scalar_types``) uses
its placeholder types, which only quantized checkpoints (GPTQ, AWQ, Marlin) would use."""

raise ImportError(
    "sgl_kernel.scalar_type is not in prefillscope's import-only sgl_kernel stand-in: "
    "its ScalarType and scalar_types serve quantized weights (--quantization gptq/awq/marlin)"
)
