"""Loading pairs: bad input gets an error that names the problem and the fix."""

from __future__ import annotations

import pytest
from conftest import make_pair, random_llama, save_model, word_tokenizer

import specrl
from specrl.engine.generation import PromptTooLongError


def test_load_pair_from_local_paths(pair):
    assert pair.vocab_size == 64
    assert pair.context_length == 256
    assert pair.device.type == "cpu"
    assert not pair.target.training and not pair.draft.training


def test_mismatched_tokenizers_are_refused(tmp_path):
    target = save_model(tmp_path / "t", random_llama(64, 0), word_tokenizer(64))
    draft = save_model(tmp_path / "d", random_llama(64, 1), word_tokenizer(64, offset=5))
    with pytest.raises(specrl.PairError, match="tokenizers differ") as error:
        specrl.load_pair(target=target, draft=draft, device="cpu")
    assert "only in draft" in str(error.value) and "w64" in str(error.value)


def test_missing_model_path_names_the_path(tmp_path):
    target = save_model(tmp_path / "t", random_llama(64, 0), word_tokenizer(64))
    missing = str(tmp_path / "no-such-draft")
    with pytest.raises(FileNotFoundError, match="draft model path .*no-such-draft.* does not exist"):
        specrl.load_pair(target=target, draft=missing, device="cpu")


def test_directory_without_config_is_refused(tmp_path):
    target = save_model(tmp_path / "t", random_llama(64, 0), word_tokenizer(64))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        specrl.load_pair(target=target, draft=str(tmp_path / "empty"), device="cpu")


def test_only_one_of_target_and_draft_is_refused():
    with pytest.raises(specrl.PairError, match="both target and draft"):
        specrl.load_pair(target="/some/path")


def test_checkpoint_smaller_than_its_tokenizer_is_refused(tmp_path):
    target = save_model(tmp_path / "t", random_llama(64, 0), word_tokenizer(64))
    draft = save_model(tmp_path / "d", random_llama(32, 1), word_tokenizer(64))
    with pytest.raises(specrl.PairError, match="draft model has 32 output rows"):
        specrl.load_pair(target=target, draft=draft, device="cpu")


def test_empty_prompt_is_refused(pair):
    decoder = specrl.SpeculativeDecoder(pair, specrl.StaticController(2))
    with pytest.raises(ValueError, match="prompt is empty"):
        decoder.generate("", max_new_tokens=4)
    with pytest.raises(ValueError, match="prompt is empty"):
        decoder.generate([], max_new_tokens=4)


def test_prompt_longer_than_context_is_refused(tmp_path):
    short = make_pair(tmp_path, context=16)
    decoder = specrl.SpeculativeDecoder(short, specrl.StaticController(2))
    with pytest.raises(PromptTooLongError, match="20 tokens but the models' context window is 16"):
        decoder.generate(list(range(20)), max_new_tokens=4)


def test_generation_stops_at_the_context_window(tmp_path):
    short = make_pair(tmp_path, context=16)
    out = specrl.SpeculativeDecoder(short, specrl.StaticController(8)).generate(
        list(range(10)), max_new_tokens=50, stop_at_eos=False
    )
    assert out.stats.new_tokens == 6


@pytest.mark.parametrize("k,tau", [(-1, 0.0), (2, 1.5), (2, -0.1), (1.5, 0.0), (True, 0.0)])
def test_out_of_range_action_is_refused(k, tau):
    with pytest.raises(ValueError, match="Action"):
        specrl.Action(k, tau)


def test_bad_sampling_settings_are_refused(pair):
    decoder = specrl.SpeculativeDecoder(pair, specrl.StaticController(2))
    with pytest.raises(ValueError, match="temperature"):
        decoder.generate([1, 2], max_new_tokens=4, temperature=-1.0)
    with pytest.raises(ValueError, match="top_p"):
        decoder.generate([1, 2], max_new_tokens=4, top_p=0.0)


def test_importing_specrl_and_loading_the_embedded_pair_print_nothing(tmp_path):
    """No logger lines from optional packages transformers pulls in (torchao, when installed), no
    warnings, no weight-loading bars: short work is quiet."""
    import subprocess
    import sys

    code = "import specrl; pair = specrl.load_pair(); print(pair.name)"
    done = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning:specrl", "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "specrl-zoo-small" and done.stderr == ""
