"""A user message through a tokenizer's chat template, up to the assistant's turn: how an instruct
model's requests are decoded (``prompts.chat``, ``specrl generate --chat``)."""

from __future__ import annotations

from typing import Any


class ChatTemplateError(ValueError):
    """A tokenizer without a chat template asked to chat-format a message."""


def chat_text(tokenizer: Any, message: str) -> str:
    """The user ``message`` through ``tokenizer``'s chat template, up to the assistant's turn.

    Raises:
        ChatTemplateError: the tokenizer has no chat template (not an instruct model's).
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ChatTemplateError(
            f"the tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template, so its "
            "prompts cannot be chat-formatted; give plain prompts, or an instruct model's tokenizer"
        )
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": message}], tokenize=False, add_generation_prompt=True
    )
