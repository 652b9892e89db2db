"""Stand-in for torchvision inside the oracle environment only (never in kvbudget's own).

transformers' image processors import torchvision at module level; vLLM and SGLang import those
processors with multimodal model classes (Gemma 3, Llama 4). The oracles never process an image,
so every ``torchvision.*`` module and name resolves to a placeholder that fails if it is ever
called. A real torchvision wheel is built against one exact torch build (its C++ operators do not
load over another), which is why a stub stands in (issue 12).
"""

import oracle_placeholder

__version__ = "0.0.0+kvbudget.oracle.stub"
oracle_placeholder.install(__name__)
