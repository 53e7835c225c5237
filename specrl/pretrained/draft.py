"""A pretrained pair's draft made from its target."""

from __future__ import annotations

import copy
import re

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from specrl.pretrained.sources import DraftShape

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


def make_draft(
    target: PreTrainedModel, shape: DraftShape, kept_tokens: list[int] | None = None
) -> PreTrainedModel:
    """A draft of ``shape`` for ``target``: its first layers (weights copied) or a narrower Llama
    (heads of the target's size, fresh weights); with a head over ``kept_tokens`` only (rows copied
    from the target's head when the width is the target's). ``kept_tokens``: ``shape.kept`` ids."""
    from specrl.pretrained.subvocab import SubVocabLlamaConfig, SubVocabLlamaForCausalLM

    if shape.kept is not None and (kept_tokens is None or len(kept_tokens) != shape.kept):
        raise ValueError(f"a draft over {shape.kept} tokens needs {shape.kept} kept_tokens")
    config = copy.deepcopy(target.config).to_dict()
    config.pop("quantization_config", None)
    config["num_hidden_layers"] = shape.layers
    if config.get("layer_types"):
        config["layer_types"] = config["layer_types"][: shape.layers]
    if shape.hidden is not None:
        head_dim = target.config.head_dim
        heads = shape.hidden // head_dim
        if heads < 1 or shape.hidden % head_dim:
            raise ValueError(f"hidden {shape.hidden} is not a multiple of the head size {head_dim}")
        config |= {
            "hidden_size": shape.hidden,
            "intermediate_size": shape.hidden * target.config.intermediate_size // target.config.hidden_size,
            "num_attention_heads": heads,
            "num_key_value_heads": heads // 3 if heads % 3 == 0 else max(1, heads // 2),
            "head_dim": head_dim,
        }
    if shape.kept is None:
        if shape.hidden is None:
            return first_layers(target, shape.layers)
        config.pop("model_type", None)
        draft = type(target)(type(target.config)(**config))
    else:
        config.pop("model_type", None)
        config.pop("tie_word_embeddings", None)
        draft = SubVocabLlamaForCausalLM(SubVocabLlamaConfig(kept_tokens=kept_tokens, **config))
        if shape.hidden is None:
            kept = {
                name: weight
                for name, weight in target.state_dict().items()
                if name != "lm_head.weight"
                and ((match := _LAYER.search(name)) is None or int(match.group(1)) < shape.layers)
            }
            kept["lm_head.weight"] = target.get_output_embeddings().weight[kept_tokens]
            draft.load_state_dict(kept)
    draft.generation_config = copy.deepcopy(target.generation_config)
    return draft.to(torch.float32).eval()
