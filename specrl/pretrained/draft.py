"""A pretrained pair's draft made from its target."""

from __future__ import annotations

import copy
import re

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

_LAYER = re.compile(r"\.layers\.(\d+)\.")


def first_layers(target: PreTrainedModel, layers: int) -> PreTrainedModel:
    """The target's first ``layers`` decoder layers with its embeddings, final norm and output head
    (weights copied, not trained)."""
    config = copy.deepcopy(target.config)
    config.num_hidden_layers = layers
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:layers]
    draft = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    kept = {
        name: weight
        for name, weight in target.state_dict().items()
        if (match := _LAYER.search(name)) is None or int(match.group(1)) < layers
    }
    draft.load_state_dict(kept)
    draft.generation_config = copy.deepcopy(target.generation_config)
    return draft.eval()
