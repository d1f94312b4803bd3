"""The router of a mixture of experts given to the checks of ``MoELayer`` in place of the student's ``route``, so that
the layer is graded on its own: Hugging Face's own ``MixtralTopKRouter`` (softmax over the experts in float32, the k
largest, renormalised), under the notebook's interface.

Imported with the notebook's checks, before any student code runs, so a submitted ``transformers`` folder cannot
stand in for the library.
"""

from __future__ import annotations

import torch

from autograder.reference.hf_llama import transformers_quiet

_MIXTRAL = transformers_quiet().models.mixtral.modeling_mixtral


def route(router_logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``router_logits`` [N, E] -> (weights [N, k] float32, experts [N, k] long), by Mixtral's router, whose weight is
    set to the identity so that its linear layer gives the logits back."""
    n_experts = router_logits.shape[-1]
    config = _MIXTRAL.MixtralConfig(hidden_size=n_experts, num_local_experts=n_experts, num_experts_per_tok=k)
    router = _MIXTRAL.MixtralTopKRouter(config)
    with torch.no_grad():
        router.weight.copy_(torch.eye(n_experts))
    _, weights, experts = router(router_logits.float())
    return weights, experts
