"""Stand-in for ``sgl_kernel.allreduce``: refuses to import, so SGLang's own
``except ImportError`` marks its custom all-reduce unavailable (it serves CUDA and ROCm
at tensor parallelism above 1, never the CPU engine)."""

raise ImportError(
    "sgl_kernel.allreduce is not in prefillscope's import-only sgl_kernel stand-in: "
    "the custom all-reduce serves --tp-size > 1 on CUDA/ROCm"
)
