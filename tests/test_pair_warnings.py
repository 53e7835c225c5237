"""A shipped policy used with another pair than it trained on warns at every entry point: the
decoder's CLI and the harness by pair name, the hosts that know only the target they serve (HF
``generate``, vLLM) by that target."""

from __future__ import annotations

import logging

import specrl
from specrl.embedded.build import shipped_dir
from specrl.models import target_folders
from specrl.vllm.proposer import controller_factory

DRAFTERS = ("draft", "ngram")  # what a proposer with a draft model runs


def test_the_embedded_pairs_target_is_the_default_policys_and_another_is_not():
    policy = specrl.LearnedController.load("default")
    assert policy.pair == "specrl-zoo-small"
    assert str((shipped_dir("small") / "target").resolve()) in target_folders(policy.pair)
    assert policy.target_warning(shipped_dir("small") / "target") is None
    warning = policy.target_warning("HuggingFaceTB/SmolLM2-360M-Instruct")
    assert warning is not None and "trained on pair 'specrl-zoo-small'" in warning
    assert "HuggingFaceTB/SmolLM2-360M-Instruct" in warning and "still exact" in warning
    assert target_folders("org/target+org/draft") == {"org/target"}


def test_vllms_proposer_logs_the_warning_once_for_a_policy_of_another_pair(caplog):
    with caplog.at_level(logging.WARNING, logger="specrl.vllm.proposer"):
        controller_factory("default", 8, DRAFTERS, target="HuggingFaceTB/SmolLM2-360M-Instruct")
    assert [r for r in caplog.records if "trained on pair 'specrl-zoo-small'" in r.getMessage()]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="specrl.vllm.proposer"):
        controller_factory("default", 8, DRAFTERS, target=str(shipped_dir("small") / "target"))
        controller_factory("tcp", 8, target="HuggingFaceTB/SmolLM2-360M-Instruct")  # a rule: no pair
    assert not [r for r in caplog.records if "trained on pair" in r.getMessage()]
