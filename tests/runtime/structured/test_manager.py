"""The core's grammar state on the built-in model's tokenizer: compiles cached and off the caller's thread,
masks that allow a valid text's every token and forbid others, a finished grammar reported once."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from model_optimizer.runtime.engine.request import Request
from model_optimizer.runtime.models.tokenizer import load_tokenizer
from model_optimizer.runtime.sampling_params import SamplingParams
from model_optimizer.runtime.structured.compiler import GrammarCompiler
from model_optimizer.runtime.structured.grammar import GrammarError
from model_optimizer.runtime.structured.manager import StructuredOutputManager
from model_optimizer.runtime.structured.params import StructuredOutputs


@pytest.fixture(scope="module")
def tokenizer():
    from model_optimizer.assets import reference_model_path

    return load_tokenizer(reference_model_path())


@pytest.fixture()
def manager(tokenizer):
    manager = StructuredOutputManager(GrammarCompiler(tokenizer, len(tokenizer) + 5, frozenset({2})))
    yield manager
    manager.close()


@pytest.fixture(params=["pool", "in_turn"])
def pool_from(request, monkeypatch) -> int:
    """PARALLEL_ADVANCE_ROWS set so that the test's rows take their tokens on llguidance's pool, or in turn."""
    from model_optimizer.runtime.structured import manager as module

    monkeypatch.setattr(module, "PARALLEL_ADVANCE_ROWS", 8 if request.param == "pool" else 1 << 30)
    return module.PARALLEL_ADVANCE_ROWS


def _allowed(mask_row: np.ndarray) -> set[int]:
    return set(np.flatnonzero(np.unpackbits(mask_row.view(np.uint8), bitorder="little")).tolist())


CASES = [
    (
        StructuredOutputs.json({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}),
        '{"a":12}',
    ),
    (StructuredOutputs.json_object(), '{"k":[1,"x"]}'),
    (StructuredOutputs.regex(r"[0-9]{3}-[a-z]{2}"), "123-ab"),
    (StructuredOutputs.choice(["yes", "no way"]), "no way"),
    (StructuredOutputs.grammar('start: "call(" NUM ")"\nNUM: /[0-9]+/'), "call(42)"),
]


@pytest.mark.parametrize(("so", "text"), CASES, ids=[c[0].kind for c in CASES])
def test_a_valid_text_is_allowed_token_by_token_and_its_end_stops_the_grammar(manager, tokenizer, so, text):
    compiled = manager.submit(so).result(timeout=60)
    request = Request("r", [1], SamplingParams(structured_outputs=so))
    manager.start("r", compiled)
    tokens = tokenizer.encode(text, add_special_tokens=False)
    for i, token in enumerate(tokens):
        mask = manager.fill([None, request])
        assert mask.mask_index.tolist() == [-1, 0]
        allowed = _allowed(mask.bitmask[0])
        assert token in allowed and len(allowed) < len(tokenizer)
        request.output_token_ids.append(token)
        ended = manager.advance([request])
        assert ended == ([] if i < len(tokens) - 1 else [(request, None)])
    assert manager.num_steps == len(tokens) and manager.max_seconds > 0


def test_a_grammar_that_can_go_on_allows_eos_once_it_is_complete(manager, tokenizer):
    so = StructuredOutputs.regex("[0-9]+")
    manager.start("r", manager.submit(so).result(timeout=60))
    request = Request("r", [1], SamplingParams(structured_outputs=so))
    assert 2 not in _allowed(manager.fill([request]).bitmask[0])  # nothing yet: EOS not allowed
    request.output_token_ids.append(tokenizer.encode("7", add_special_tokens=False)[0])
    assert manager.advance([request]) == []
    assert 2 in _allowed(manager.fill([request]).bitmask[0])
    request.output_token_ids.append(2)
    assert manager.advance([request]) == [(request, None)]


def test_a_token_outside_the_grammar_fails_the_request_alone(manager, tokenizer):
    so = StructuredOutputs.choice(["yes"])
    compiled = manager.submit(so).result(timeout=60)
    good, bad = (Request(rid, [1], SamplingParams(structured_outputs=so)) for rid in ("good", "bad"))
    manager.start("good", compiled)
    manager.start("bad", compiled)
    good.output_token_ids.append(tokenizer.encode("yes", add_special_tokens=False)[0])
    bad.output_token_ids.append(tokenizer.encode("no", add_special_tokens=False)[0])
    ended = dict(manager.advance([good, bad]))
    assert bad in ended and "left its grammar" in ended[bad] and ended.get(good) is None


def test_a_pool_of_rows_in_several_lanes_reports_stops_and_failures_in_row_order(tokenizer, pool_from):
    """From PARALLEL_ADVANCE_ROWS rows the matchers take their tokens on the pool, grouped by lane, below it
    in turn: either way each row's outcome (went on, stopped, failed) must be its own, reported in the
    rows' order."""
    manager = StructuredOutputManager(GrammarCompiler(tokenizer, len(tokenizer) + 5, frozenset({2}), lanes=3), 2)
    yes = manager.submit(StructuredOutputs.choice(["yes"])).result(timeout=60)
    digits = manager.submit(StructuredOutputs.regex("[0-9]+")).result(timeout=60)
    for k, compiled in enumerate((yes, digits)):
        manager.start(f"warm{k}", compiled)  # a request that keeps the lanes live while the rows run
        compiled.grow()
    encode = {text: tokenizer.encode(text, add_special_tokens=False)[0] for text in ("yes", "no", "7")}
    plan = ["7", "yes", "no", "7", "no", "yes", "7", "7", "yes", "no", "7", "no"]  # digits take only "7"
    requests = []
    for i, text in enumerate(plan):
        requests.append(Request(f"r{i}", [1], SamplingParams()))
        manager.start(f"r{i}", digits if text == "7" else yes)
    assert (len(plan) >= pool_from) == (pool_from == 8)
    assert len({manager.lane_of(r.request_id) for r in requests}) == 3
    sampled = {r.request_id: (encode[text], None) for r, text in zip(requests, plan)}
    ended = manager.take(sampled, requests)
    expected = [(r, text) for r, text in zip(requests, plan) if text != "7"]
    assert [request for request, _ in ended] == [request for request, _ in expected]
    for (_, error), (_, text) in zip(ended, expected):
        assert (error is None) == (text == "yes") and (text == "yes" or "left its grammar" in error)
    live = manager.fill(requests)
    assert (live.mask_index >= 0).sum() == plan.count("7")  # the ended rows need no mask any more
    manager.close()


def test_rows_without_a_live_matcher_need_no_mask(manager):
    so = StructuredOutputs.regex("a+")
    manager.start("r", manager.submit(so).result(timeout=60))
    finished = Request("r", [1], SamplingParams(structured_outputs=so))
    finished.status = finished.status.FINISHED_ABORTED
    assert manager.fill([None, finished, Request("free", [1], SamplingParams())]) is None
    manager.drop("r")
    assert not manager.has("r") and manager.num_matchers == 0


def test_compiles_are_cached_per_constraint_and_failures_carry_the_reason(manager):
    first = manager.submit(StructuredOutputs.regex("a+"))
    assert manager.submit(StructuredOutputs.regex("a+")) is first
    assert manager.submit(StructuredOutputs.regex("b+")) is not first
    bad = manager.submit(StructuredOutputs.json({"type": "integer", "minimum": 3, "maximum": 1}))
    with pytest.raises(GrammarError, match="minimum"):
        bad.result(timeout=60)
    assert manager.submit(StructuredOutputs.json({"type": "integer", "minimum": 3, "maximum": 1})) is bad


def test_a_word_level_tokenizer_without_a_decoder_is_refused(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    from model_optimizer.runtime.models.fast_tokenizer import FastTokenizer
    from model_optimizer.runtime.structured.grammar import ll_tokenizer

    backend = Tokenizer(models.WordLevel({"w0": 0, "w1": 1}, unk_token="w0"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    with pytest.raises(ValueError, match="structured outputs are not available for this tokenizer"):
        ll_tokenizer(FastTokenizer(tmp_path, backend, {"eos_token": "w1"}), 2, frozenset({1}))


def test_lanes_spread_requests_and_fill_the_same_masks_as_one_lane(tokenizer, pool_from):
    """Matchers of different lanes have lexers of their own (so they fill in parallel); the masks must be
    those of one shared lexer, bit for bit, for rows filled together in one pool call (and advanced on
    the pool or in turn)."""
    so = StructuredOutputs.json({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]})
    texts = ['{"a":"x"}', '{"a":"yy zz"}', '{"a":""}', '{"a":"q r"}', '{"a":"12"}'] * 2  # 10 rows
    assert (len(texts) >= pool_from) == (pool_from == 8)
    single = StructuredOutputManager(GrammarCompiler(tokenizer, len(tokenizer) + 5, frozenset({2})), threads=1)
    laned = StructuredOutputManager(GrammarCompiler(tokenizer, len(tokenizer) + 5, frozenset({2}), lanes=3), threads=2)
    streams = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
    batches = []
    for manager in (single, laned):
        compiled = manager.submit(so).result(timeout=60)
        compiled.grow()
        assert compiled.lanes == manager.compiler.lanes
        requests = [Request(f"r{i}", [1], SamplingParams(structured_outputs=so)) for i in range(len(texts))]
        for request in requests:
            manager.start(request.request_id, compiled)
        masks, ended = [], []
        for step in range(max(map(len, streams))):
            live = [r for r in requests if manager.has(r.request_id) and not r.finished]
            mask = manager.fill(live)
            masks.append(mask.bitmask.copy())
            for k, request in enumerate(live):
                tokens = streams[int(request.request_id[1:])]
                assert tokens[step] in _allowed(mask.bitmask[mask.mask_index[k]])
                request.output_token_ids.append(tokens[step])
            for request, error in manager.advance(live):
                assert error is None
                manager.drop(request.request_id)
                ended.append(request.request_id)
        assert sorted(ended) == [f"r{i}" for i in range(len(texts))] and manager.num_matchers == 0
        batches.append(masks)
        manager.close()
    assert len(batches[0]) == len(batches[1])
    for one, many in zip(*batches, strict=True):
        np.testing.assert_array_equal(one, many)


def test_a_request_starts_in_the_least_busy_lane(tokenizer):
    manager = StructuredOutputManager(GrammarCompiler(tokenizer, len(tokenizer) + 5, frozenset({2}), lanes=2), 2)
    compiled = manager.submit(StructuredOutputs.regex("a+")).result(timeout=60)
    compiled.grow()
    for rid in ("a", "b", "c"):
        manager.start(rid, compiled)
    lanes = {rid: manager.lane_of(rid) for rid in ("a", "b", "c")}
    assert sorted(lanes.values()) == [0, 0, 1]
    busy = [rid for rid, lane in lanes.items() if lane == 0]
    manager.drop(busy[0])
    manager.drop(busy[1])
    manager.start("d", compiled)
    assert manager.lane_of("d") == 0
    manager.close()


def test_lane_and_thread_counts_below_one_are_refused(tokenizer):
    with pytest.raises(ValueError, match="lanes must be at least 1"):
        GrammarCompiler(tokenizer, len(tokenizer), frozenset({2}), lanes=0)
    with pytest.raises(ValueError, match="threads must be at least 1"):
        StructuredOutputManager(GrammarCompiler(tokenizer, len(tokenizer), frozenset({2})), threads=0)


def test_a_constraint_builds_its_other_lanes_only_once_two_requests_use_it(tokenizer):
    manager = StructuredOutputManager(GrammarCompiler(tokenizer, len(tokenizer) + 5, frozenset({2}), lanes=3), 2)
    compiled = manager.submit(StructuredOutputs.regex("[0-9]+")).result(timeout=60)
    manager.start("a", compiled)
    assert compiled.lanes == 1 and not compiled.growing  # used once: one compile, one lane
    manager.start("b", compiled)  # a second user: the pool builds the others
    assert compiled.growing and manager.lane_of("b") == 0  # nothing built yet to spread to
    compiled.grow()  # waits for the pool's
    assert compiled.lanes == 3
    manager.start("c", compiled)
    assert manager.lane_of("c") == 1
    manager.close()


@pytest.mark.parametrize("large", [False, True])
def test_lanes_follow_the_live_matchers_and_a_large_constraints_go_when_the_last_is_done(tokenizer, monkeypatch, large):
    """A constraint grows a lane for each live matcher beyond the lanes built (up to its lanes: all 48 for
    every schema used twice took gigabytes on a 16-core host); once no request uses it, a large one keeps
    one lane (its lexers weigh megabytes), a small one its warm lanes."""
    from model_optimizer.runtime.structured import compiler as compiler_module

    if large:
        monkeypatch.setattr(compiler_module, "LANE_TRIM_CHARS", 0)
    manager = StructuredOutputManager(GrammarCompiler(tokenizer, len(tokenizer) + 5, frozenset({2}), lanes=8), 2)
    compiled = manager.submit(StructuredOutputs.regex("[0-9]+")).result(timeout=60)
    for name in "abc":
        manager.start(name, compiled)
    deadline = time.monotonic() + 60
    while compiled.growing and time.monotonic() < deadline:
        time.sleep(0.01)
    assert compiled.lanes == 3  # three live matchers, three lanes: not all eight
    for name in "abc":
        manager.drop(name)
    assert compiled.lanes == (1 if large else 3)
    manager.start("d", compiled)
    assert not compiled.growing  # one user again: nothing to build
    manager.close()


def test_the_compile_cache_is_bounded_by_the_constraints_text(tokenizer, monkeypatch):
    from model_optimizer.runtime.structured import compiler as compiler_module

    monkeypatch.setattr(compiler_module, "CACHE_CHARS", 3000)
    compiler = GrammarCompiler(tokenizer, len(tokenizer) + 5, frozenset({2}))
    big = [StructuredOutputs.choice([f"{k}-{i:04d}" for i in range(100)]) for k in range(3)]  # ~1,300 characters
    first = compiler.submit(big[0])
    for so in big[1:]:
        compiler.submit(so).result(timeout=60)
    assert compiler.submit(big[0]) is not first  # dropped for the others: compiled anew
    assert compiler.submit(big[2]) is compiler.submit(big[2])
    compiler.close()


def test_a_new_constraint_compiles_between_another_s_lanes(tokenizer):
    """Lanes are built one task each: a constraint submitted while a popular one grows its lanes waits for
    one lane at most, not for all of them (one pool thread here, so the order is the queue's)."""
    compiler = GrammarCompiler(tokenizer, len(tokenizer) + 5, frozenset({2}), max_threads=1, lanes=8)
    manager = StructuredOutputManager(compiler, 2)
    popular = manager.submit(StructuredOutputs.regex("[0-9]+")).result(timeout=60)
    manager.start("a", popular)
    manager.start("b", popular)  # the lanes start growing
    seen: list[int] = []
    new = manager.submit(StructuredOutputs.regex("[a-z]+"))
    new.add_done_callback(lambda _: seen.append(popular.lanes))  # runs in the pool thread, as the compile ends
    new.result(timeout=60)
    popular.grow()
    assert seen and seen[0] <= 2 and popular.lanes == 8
    manager.close()


ONE_STRING = StructuredOutputs.json({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]})


def _walk_against_llguidance(tokenizer, manager, compiled, texts: list[str], before_fill=None) -> None:  # noqa: ANN001
    """Requests of ONE_STRING spelling `texts` walk them through `take` (the runner's ids fed before the
    scheduler appends them, the engine core's order): every mask must be the one llguidance computes for a
    fresh matcher that took the same tokens, and each grammar's end is reported once, at its text's end.
    `before_fill(step, live)` runs before each step's fill (lanes built meanwhile, checks)."""
    import llguidance as llg

    from model_optimizer.runtime.structured.grammar import check, ll_tokenizer

    streams = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
    requests = {
        f"r{i}": Request(f"r{i}", [1], SamplingParams(structured_outputs=ONE_STRING)) for i in range(len(texts))
    }
    for request_id in requests:
        manager.start(request_id, compiled)
    ll = ll_tokenizer(tokenizer, len(tokenizer) + 5, frozenset({2}))
    grammar = check(ONE_STRING, ll)
    ended_ids = []
    for step in range(max(map(len, streams))):
        live = [r for r in requests.values() if manager.has(r.request_id) and not r.finished]
        if before_fill is not None:
            before_fill(step, live)
        mask = manager.fill(live)
        for k, request in enumerate(live):
            reference = llg.LLMatcher(ll, grammar)
            reference.consume_tokens(request.output_token_ids)
            expected = np.frombuffer(reference.compute_bitmask(), dtype=np.int32)
            np.testing.assert_array_equal(mask.bitmask[mask.mask_index[k]], expected[: mask.bitmask.shape[1]])
        sampled = {r.request_id: (streams[int(r.request_id[1:])][step], None) for r in live}
        ended = manager.take(sampled, requests.values())
        for request in live:  # the scheduler's append, after
            request.output_token_ids.append(sampled[request.request_id][0])
        for request, error in ended:
            assert error is None and len(request.output_token_ids) == len(streams[int(request.request_id[1:])])
            manager.drop(request.request_id)
            ended_ids.append(request.request_id)
    assert sorted(ended_ids) == sorted(requests) and manager.num_matchers == 0


def test_tokens_taken_before_the_append_give_llguidances_own_masks(tokenizer, pool_from):
    """`take` feeds the runner's sampled ids before the scheduler appends them, so that the next masks start
    at once: the masks stay llguidance's own, on the pool or in turn."""
    manager = StructuredOutputManager(GrammarCompiler(tokenizer, len(tokenizer) + 5, frozenset({2}), lanes=3), 2)
    compiled = manager.submit(ONE_STRING).result(timeout=60)
    compiled.grow()
    _walk_against_llguidance(
        tokenizer, manager, compiled, ['{"a":"x"}', '{"a":"yy zz"}', '{"a":""}', '{"a":"q r"}', '{"a":"12"}'] * 2
    )
    manager.close()


def test_matchers_started_before_their_lanes_move_onto_them_with_llguidances_own_masks(tokenizer):
    """A burst of requests starts while its constraint has one lane (the compile pool is held busy here):
    once the lanes are built, the next fill spreads the live matchers over them (their tokens replayed),
    and every mask before and after the move is still llguidance's own."""
    compiler = GrammarCompiler(tokenizer, len(tokenizer) + 5, frozenset({2}), max_threads=1, lanes=3)
    manager = StructuredOutputManager(compiler, threads=2)
    compiled = manager.submit(ONE_STRING).result(timeout=60)
    gate = threading.Event()
    compiler.pool.submit(gate.wait, 60)  # the lanes' builds queue behind it
    moved = []

    def lanes_come(step: int, live: list) -> None:
        if step == 0:
            assert compiled.lanes == 1 and {manager.lane_of(r.request_id) for r in live} == {0}
        if step == 2:  # two tokens taken on lane 0: now the lanes come, and the next fill spreads the matchers
            gate.set()
            compiled.grow()
            manager.fill(live)
            lanes = [manager.lane_of(r.request_id) for r in live]
            assert compiled.lanes == 3 and max(lanes.count(lane) for lane in range(3)) == -(-len(live) // 3)
            moved.append(step)

    texts = ['{"a":"x"}', '{"a":"yy zz"}', '{"a":"q r"}', '{"a":"12"}', '{"a":"long text"}'] * 2
    _walk_against_llguidance(tokenizer, manager, compiled, texts, lanes_come)
    assert moved and manager._lane_load == [0, 0, 0] and not manager._spreading
    manager.close()


def test_a_lane_built_while_matchers_move_is_spread_onto_at_the_next_fill(tokenizer):
    """The pool may build the last lane while a fill moves matchers onto the one before: the constraint
    must stay to be spread again, not be forgotten with that lane left empty."""
    compiler = GrammarCompiler(tokenizer, len(tokenizer) + 5, frozenset({2}), max_threads=1, lanes=3)
    manager = StructuredOutputManager(compiler, threads=1)
    compiled = manager.submit(ONE_STRING).result(timeout=60)
    gate = threading.Event()
    compiler.pool.submit(gate.wait, 60)  # the lanes' builds wait: this test builds them itself
    requests = [Request(f"r{i}", [1], SamplingParams(structured_outputs=ONE_STRING)) for i in range(6)]
    for request in requests:
        manager.start(request.request_id, compiled)
    compiled._templates.append(compiled._make())  # lane 1 built before the fill
    copy = compiled.copy

    def copy_while_the_pool_builds(lane: int):  # noqa: ANN202
        if compiled.lanes < 3:
            compiled._templates.append(compiled._make())  # the last lane lands during the first move
        return copy(lane)

    compiled.copy = copy_while_the_pool_builds
    manager.fill(requests)
    compiled.copy = copy
    manager.fill(requests)
    lanes = [manager.lane_of(r.request_id) for r in requests]
    assert compiled.lanes == 3 and [lanes.count(lane) for lane in range(3)] == [2, 2, 2]
    assert not manager._spreading
    gate.set()
    manager.close()


def test_a_fill_moves_matchers_for_a_budget_of_replayed_tokens(tokenizer, monkeypatch):
    """Moves replay tokens on the step loop: a fill spends at most MOVE_TOKENS_PER_FILL of them (here one
    move a fill) and the next fills move the rest, until the matchers are even and the constraint is done."""
    from model_optimizer.runtime.structured import manager as module

    monkeypatch.setattr(module, "MOVE_TOKENS_PER_FILL", 1)
    compiler = GrammarCompiler(tokenizer, len(tokenizer) + 5, frozenset({2}), max_threads=1, lanes=3)
    manager = StructuredOutputManager(compiler, threads=1)
    compiled = manager.submit(ONE_STRING).result(timeout=60)
    gate = threading.Event()
    compiler.pool.submit(gate.wait, 60)
    requests = [Request(f"r{i}", [1], SamplingParams(structured_outputs=ONE_STRING)) for i in range(6)]
    for request in requests:
        manager.start(request.request_id, compiled)
    tokens = tokenizer.encode('{"a":"x', add_special_tokens=False)
    for request in requests:
        request.output_token_ids.extend(tokens)
    manager.advance(requests)  # several tokens at once: the catch-up path
    gate.set()
    compiled.grow()
    on_lane_0 = []
    for _ in range(5):
        manager.fill(requests)
        on_lane_0.append(sum(manager.lane_of(r.request_id) == 0 for r in requests))
    assert on_lane_0 == [5, 4, 3, 2, 2] and not manager._spreading
    assert sorted(manager.lane_of(r.request_id) for r in requests) == [0, 0, 1, 1, 2, 2]
    manager.close()


def test_take_skips_tokens_the_scheduler_will_not_append(manager, tokenizer):
    """A request finished meanwhile drops its token, and a non-finite row (id -1) fails: neither matcher may
    take anything; ids of requests without a grammar, or unknown to the scheduler, are ignored."""
    from model_optimizer.runtime.sampler_output import NONFINITE_TOKEN

    so = StructuredOutputs.regex("[0-9]+")
    compiled = manager.submit(so).result(timeout=60)
    requests = {rid: Request(rid, [1], SamplingParams(structured_outputs=so)) for rid in ("done", "nan", "ok")}
    for rid in requests:
        manager.start(rid, compiled)
    requests["done"].status = requests["done"].status.FINISHED_ABORTED
    seven = tokenizer.encode("7", add_special_tokens=False)[0]
    sampled = {"done": (seven, None), "nan": (NONFINITE_TOKEN, None), "ok": (seven, None)}
    sampled |= {"free": (seven, None), "gone": (seven, None)}
    requests["free"] = Request("free", [1], SamplingParams())
    assert manager.take(sampled, requests.values()) == []
    requests["ok"].output_token_ids.append(seven)
    requests["nan"].status = requests["nan"].status.FINISHED_ERROR
    assert manager.advance(list(requests.values())) == []  # "ok" took its token already: nothing new
    eos_allowed = [2 in _allowed(manager.fill([requests[rid]]).bitmask[0]) for rid in ("ok",)]
    assert eos_allowed == [True]  # "ok" consumed "7"; EOS completes [0-9]+
    fresh = Request("done", [1], SamplingParams(structured_outputs=so))  # "done"'s matcher took nothing
    assert 2 not in _allowed(manager.fill([fresh]).bitmask[0])


@pytest.mark.parametrize("value", ["0", "x", "100000"])
def test_a_fill_thread_count_outside_the_cores_is_refused(monkeypatch, value):
    from model_optimizer.runtime.structured.manager import FILL_THREADS_ENV, default_fill_threads

    monkeypatch.setenv(FILL_THREADS_ENV, value)
    with pytest.raises(ValueError, match="MOPT_GRAMMAR_THREADS must be a whole number from 1 to"):
        default_fill_threads()
    monkeypatch.setenv(FILL_THREADS_ENV, "1")
    assert default_fill_threads() == 1


def test_the_default_fill_threads_leave_four_cores_and_stop_at_twelve(monkeypatch):
    from model_optimizer.runtime.structured import manager

    monkeypatch.delenv(manager.FILL_THREADS_ENV, raising=False)
    for cores, threads in ((2, 1), (8, 4), (16, 12), (64, 12)):
        monkeypatch.setattr(manager.os, "sched_getaffinity", lambda _pid, n=cores: set(range(n)), raising=False)
        assert manager.default_fill_threads() == threads
