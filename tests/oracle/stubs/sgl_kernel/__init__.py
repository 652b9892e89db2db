"""Stand-in for sgl_kernel (SGLang's CUDA kernels) inside the oracle environment only.

SGLang imports kernels at module level for the quantization and attention layers; its sizing code
(ServerArgs defaults, ModelConfig, the memory-pool configurator) never calls one. Every
``sgl_kernel.*`` module and name resolves to a placeholder that fails if it is ever called.
"""

import oracle_placeholder

__version__ = "0.4.10"  # the version SGLang 0.5.23 pins (sglang-kernel==0.4.10)
oracle_placeholder.install(__name__)
