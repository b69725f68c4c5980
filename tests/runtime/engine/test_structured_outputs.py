"""Structured outputs through the engine: whatever the model would say, the constraint makes it valid.

The built-in model writes Python documentation, not JSON: every document below validates only because
the grammar's masks allowed nothing else (checked with `jsonschema`, at temperature 0 and 1). Then the
engine features with constrained requests in the batch: n > 1, logprobs, preemption, prefix caching,
asynchronous against synchronous scheduling, a grammar that fails to compile, an abort while compiling.
"""

from __future__ import annotations

import json
import math
import re
import threading

import jsonschema
import pytest

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.sampling_params import RequestOutputKind
from model_optimizer.runtime.structured import StructuredOutputs

SCHEMAS = {
    "nested": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "address": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 10},
                    "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                },
                "required": ["city", "zip"],
                "additionalProperties": False,
            },
        },
        "required": ["name", "address"],
        "additionalProperties": False,
    },
    "array_bounds": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 99}},
            "required": ["id"],
        },
        "minItems": 2,
        "maxItems": 4,
    },
    "enum_const": {
        "type": "object",
        "properties": {
            "kind": {"const": "order"},
            "status": {"enum": ["open", "closed", 3, None]},
            "flags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
        },
        "required": ["kind", "status", "flags"],
        "additionalProperties": False,
    },
    "any_of": {
        "type": "object",
        "properties": {
            "value": {
                "anyOf": [
                    {"type": "integer", "minimum": -5, "maximum": 5},
                    {"type": "string", "maxLength": 4},
                    {"type": "null"},
                ]
            },
            "pair": {
                "anyOf": [
                    {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
                    {"type": "boolean"},
                ]
            },
        },
        "required": ["value", "pair"],
        "additionalProperties": False,
    },
    "numeric_ranges": {
        "type": "object",
        "properties": {
            "age": {"type": "integer", "minimum": 18, "maximum": 65},
            "score": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            "offset": {"type": "integer", "minimum": -1000, "maximum": -10},
        },
        "required": ["age", "score", "offset"],
        "additionalProperties": False,
    },
    "string_patterns": {
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
            "word": {"type": "string", "minLength": 2, "maxLength": 6},
            "day": {"type": "string", "format": "date"},
        },
        "required": ["code", "word", "day"],
        "additionalProperties": False,
    },
}


@pytest.fixture(scope="module")
def builtin():
    return LLM(kv_cache_memory=1 << 26, max_model_len=512)


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_every_schema_yields_valid_json_on_the_builtin_model(builtin, name):
    schema = SCHEMAS[name]
    so = StructuredOutputs.json(schema)
    prompts = ["The json module", "class Path"]
    greedy = SamplingParams(temperature=0, max_tokens=200, structured_outputs=so)
    sampled = SamplingParams(temperature=1.0, max_tokens=200, n=3, seed=7, structured_outputs=so)
    outputs = builtin.generate(prompts, greedy) + builtin.generate(prompts, sampled)
    texts = [c.text for o in outputs for c in o.outputs]
    assert len(texts) == 8 and len(set(texts[2:])) > 1  # sampling explores
    for o in outputs:
        for c in o.outputs:
            assert c.finish_reason == "stop", c.text
            jsonschema.validate(json.loads(c.text), schema, format_checker=jsonschema.FormatChecker())


def test_regex_choice_and_grammar_hold_at_temperature_1(builtin):
    cases = [
        (StructuredOutputs.regex(r"[a-z]{3}-[0-9]{2,4}"), lambda t: re.fullmatch(r"[a-z]{3}-[0-9]{2,4}", t)),
        (StructuredOutputs.choice(["red", "green", "blue sky"]), lambda t: t in ("red", "green", "blue sky")),
        (
            StructuredOutputs.grammar('start: "f(" NUM ("," NUM)* ")"\nNUM: /[0-9]{1,3}/'),
            lambda t: re.fullmatch(r"f\(\d{1,3}(,\d{1,3})*\)", t),
        ),
        (StructuredOutputs.json_object(), lambda t: isinstance(json.loads(t), dict)),
    ]
    for so, valid in cases:
        [out] = builtin.generate(
            ["x = "], SamplingParams(temperature=1.0, n=4, seed=3, max_tokens=300, structured_outputs=so)
        )
        for c in out.outputs:
            assert c.finish_reason == "stop" and valid(c.text), (so.kind, c.text)


def test_vllms_params_classes_constrain_the_builtin_model(builtin):
    """Code written for vLLM (`SamplingParams(structured_outputs=StructuredOutputsParams(...))`, or the older
    `guided_decoding=GuidedDecodingParams(...)`) runs unchanged: the outputs validate, and vLLM's flags mean
    what they do there (disable_additional_properties closes every object)."""
    from model_optimizer.runtime.sampling_params import GuidedDecodingParams, StructuredOutputsParams

    open_schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}}}
    params = [
        SamplingParams(
            temperature=1.0, seed=5, max_tokens=80,
            structured_outputs=StructuredOutputsParams(json=open_schema, disable_additional_properties=True),
        ),
        SamplingParams(temperature=1.0, seed=5, max_tokens=80, guided_decoding=GuidedDecodingParams(
            choice=["yes", "no"], backend="xgrammar", disable_fallback=True)),
    ]  # fmt: skip
    closed_schema = {**open_schema, "additionalProperties": False}
    assert params[0].structured_outputs == StructuredOutputs.json(closed_schema)
    assert params[1].structured_outputs == StructuredOutputs.choice(["yes", "no"]) and params[1].guided_decoding is None
    document, answer = builtin.generate(["x = ", "x = "], params)
    jsonschema.validate(json.loads(document.outputs[0].text), closed_schema)
    assert answer.outputs[0].text in ("yes", "no")


ITEMS = {
    "type": "object",
    "properties": {"items": {"type": "array", "items": {"enum": ["a", "bb", "ccc"]}, "minItems": 3, "maxItems": 8}},
    "required": ["items"],
    "additionalProperties": False,
}
CONSTRAINED = SamplingParams(temperature=0, max_tokens=60, structured_outputs=StructuredOutputs.json(ITEMS))
FREE = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
PROMPTS = [[5 + i, 17, 300 + i, 41, 9] * (2 + i % 3) for i in range(8)]


@pytest.fixture(scope="module")
def model_dir(tiny_model):
    return str(tiny_model("qwen3"))


@pytest.fixture(scope="module")
def reference(model_dir):
    """Constrained and free requests alone on a roomy engine (synchronous): what every variant reproduces."""
    llm = LLM(model_dir, kv_cache_memory=1 << 24, enable_prefix_caching=False, async_scheduling=False)
    return [_ids(llm.generate([p], CONSTRAINED if i % 2 else FREE)) for i, p in enumerate(PROMPTS)]


def _ids(outputs):
    return [list(c.token_ids) for o in outputs for c in o.outputs]


def _mixed(llm):
    """Every other request constrained, all in one batch."""
    outputs = llm.generate(PROMPTS, [CONSTRAINED if i % 2 else FREE for i in range(len(PROMPTS))])
    for i, o in enumerate(outputs):
        if i % 2:
            jsonschema.validate(json.loads(o.outputs[0].text), ITEMS)
    return [_ids([o]) for o in outputs]


@pytest.mark.parametrize(
    "engine_args",
    [
        dict(kv_cache_memory=1 << 24),  # asynchronous scheduling: masks filled while the forward runs
        dict(kv_cache_memory=1 << 24, async_scheduling=False),
        dict(num_kv_blocks=24, block_size=4, max_model_len=96, enable_prefix_caching=False),  # preempts
        dict(kv_cache_memory=1 << 24, max_num_batched_tokens=7),  # tiny chunks: prompts over several steps
    ],
    ids=["async", "sync", "preemption", "chunked"],
)
def test_a_mixed_batch_gives_what_each_request_gives_alone(model_dir, reference, engine_args):
    llm = LLM(model_dir, **engine_args)
    assert _mixed(llm) == reference
    stats = llm.engine.stats()
    assert stats.grammar_steps > 0 and stats.grammar_seconds > 0 and stats.grammar_wait_seconds >= 0
    if engine_args.get("num_kv_blocks"):
        assert stats.num_preemptions > 0  # the matchers kept their state through it
    assert llm.engine.core.constrained.manager.num_matchers == 0  # every finished request let its matcher go


def test_the_next_step_is_prepared_while_the_masks_fill_and_changes_nothing(model_dir, monkeypatch):
    """Asynchronous scheduling: after a masked step, the next step's inputs are written before that
    step's sampling is queued (its host work overlaps the fill), and the forward is queued right after
    the sampling. Greedy and seeded outputs are those of the launch in one piece."""
    sampled = SamplingParams(
        temperature=1.0, n=2, seed=11, max_tokens=40, structured_outputs=StructuredOutputs.json(ITEMS)
    )
    params = [CONSTRAINED if i % 2 else sampled for i in range(4)]

    def run(early: bool) -> tuple[list, list[str]]:
        llm = LLM(model_dir, kv_cache_memory=1 << 24)
        core, runner = llm.engine.core, llm.engine.core.runner
        events: list[str] = []
        prepare_early = core._prepare_early

        def recorded_prepare(out, previous):
            prepared = prepare_early(out, previous) if early else None
            if prepared is not None:
                events.append("prepared")
            return prepared

        monkeypatch.setattr(core, "_prepare_early", recorded_prepare)
        for name in ("sample", "submit"):
            original = getattr(runner, name)
            monkeypatch.setattr(runner, name, lambda *a, _f=original, _n=name, **k: events.append(_n) or _f(*a, **k))
        return _ids(llm.generate(PROMPTS[:4], params)), events

    (outputs, events), (alone, plain_events) = run(True), run(False)
    assert outputs == alone
    assert events.count("prepared") > 5 and "prepared" not in plain_events
    for i, event in enumerate(events):  # each prepared step: the previous sampling, then its forward
        if event == "prepared":
            assert events[i + 1 : i + 3] == ["sample", "submit"], events[i : i + 3]


def test_prefix_cache_hits_and_n_completions_keep_their_own_grammar_state(model_dir):
    llm = LLM(model_dir, kv_cache_memory=1 << 24, enable_prefix_caching=True)
    sampled = SamplingParams(
        temperature=1.0, n=4, seed=5, max_tokens=60, structured_outputs=StructuredOutputs.json(ITEMS)
    )
    prompt = PROMPTS[3] * 4  # 40 tokens: two full blocks to share
    first, second = (llm.generate([prompt], sampled)[0] for _ in range(2))
    assert second.num_cached_tokens > 0
    for out in (first, second):
        texts = [c.text for c in out.outputs]
        assert len(set(texts)) > 1  # four completions, four matchers
        for text in texts:
            jsonschema.validate(json.loads(text), ITEMS)
    assert [c.text for c in first.outputs] == [c.text for c in second.outputs]  # seeded: the cache changes nothing


def test_a_grammar_that_ends_on_eos_under_ignore_eos_leaves_it_out_of_the_text(model_dir):
    """The mask allows EOS where the grammar may end; under ignore_eos the EOS did not stop the request,
    the grammar did, and the EOS stayed in the text ('699999100100656<|im_end|>' for [0-9]+)."""
    llm = LLM(model_dir, kv_cache_memory=1 << 24)
    eos = llm.get_tokenizer().eos_token_id
    ended_on_eos = 0
    for ignore_eos in (False, True):
        params = SamplingParams(temperature=1.0, seed=1, n=4, max_tokens=20, ignore_eos=ignore_eos,
                                skip_special_tokens=False, structured_outputs=StructuredOutputs.regex(r"[0-9]+"))  # fmt: skip
        for c in llm.generate([[5, 17, 300, 41, 9] * 3], params)[0].outputs:
            assert re.fullmatch(r"[0-9]+", c.text), (ignore_eos, c.text)
            ended_on_eos += ignore_eos and c.finish_reason == "stop" and c.token_ids[-1] == eos
    assert ended_on_eos  # the case happened


def test_logprobs_are_over_the_tokens_the_grammar_allows(model_dir):
    llm = LLM(model_dir, kv_cache_memory=1 << 24)
    tokenizer = llm.tokenizer
    options = ["alpha", "beta", "gamma"]
    params = SamplingParams(
        temperature=0, logprobs=20, max_tokens=10, structured_outputs=StructuredOutputs.choice(options)
    )
    [out] = llm.generate([PROMPTS[0]], params)
    completion = out.outputs[0]
    assert completion.text in options
    first = completion.logprobs[0]
    starts = {tokenizer.decode([t]) for t in first.top}
    assert all(any(o.startswith(s) for o in options) for s in starts)  # no forbidden token listed
    assert len(first.top) < 20  # fewer allowed tokens than asked for: all of them, and only them
    assert abs(sum(math.exp(v) for v in first.top.values()) - 1) < 1e-4  # renormalised over the allowed ones


def test_a_grammar_the_core_cannot_compile_fails_its_request_alone(model_dir):
    """The server (a 400) and LLM.generate (a ValueError) refuse such a constraint before it reaches the
    core; sent to the engine anyway, the request finishes with an error naming the reason, and the
    others run."""
    llm = LLM(model_dir, kv_cache_memory=1 << 24)
    bad = SamplingParams(
        max_tokens=5, structured_outputs=StructuredOutputs.json({"type": "integer", "minimum": 3, "maximum": 1})
    )
    with pytest.raises(ValueError, match=r"minimum \(3\)"):
        llm.generate([PROMPTS[0], PROMPTS[1]], [bad, FREE])
    engine = llm.engine
    engine.add_request("bad", PROMPTS[0], bad.clone(output_kind=RequestOutputKind.FINAL_ONLY))
    engine.add_request("free", PROMPTS[1], FREE.clone(output_kind=RequestOutputKind.FINAL_ONLY))
    finished = {}
    while engine.has_unfinished_requests():
        finished |= {o.request_id: o for o in engine.step() if o.finished}
    assert finished["bad"].outputs[0].finish_reason == "error" and "minimum (3)" in finished["bad"].error
    assert finished["free"].outputs[0].finish_reason == "length"


def test_close_stops_the_grammar_threads(model_dir):
    llm = LLM(model_dir, kv_cache_memory=1 << 24)
    [out] = llm.generate([PROMPTS[0]], CONSTRAINED)
    assert json.loads(out.outputs[0].text) is not None
    constrained = llm.engine.core.constrained
    threads = [*constrained._filler._threads, *constrained.manager.compiler.pool._threads]
    assert threads and all(t.is_alive() for t in threads)
    llm.close()
    for thread in threads:
        thread.join(10)
    assert not any(t.is_alive() for t in threads)


def test_abort_while_the_grammar_compiles(model_dir):
    llm = LLM(model_dir, kv_cache_memory=1 << 24)
    engine = llm.engine
    engine.add_request("c", PROMPTS[0], CONSTRAINED.clone(n=2))
    assert engine.has_unfinished_requests() and "c" in engine.core.constrained.compiling
    engine.abort("c")
    assert not engine.has_unfinished_requests() and not engine.core.groups
    engine.add_request("c", PROMPTS[0], CONSTRAINED)  # the id is free again
    while engine.has_unfinished_requests():
        outputs = engine.step()
    assert outputs[0].finished and json.loads(outputs[0].outputs[0].text)


def test_an_abort_cancels_a_compile_no_one_else_waits_for(model_dir):
    """Requests whose clients left must not keep compiles queued ahead of the next request's: an abort
    cancels a compile that has not started and that no other request waits for, and forgets it."""
    engine = LLM(model_dir, kv_cache_memory=1 << 24).engine
    engine.add_request("warm", PROMPTS[0], CONSTRAINED)  # the grammar side and its tokenizer exist
    while engine.has_unfinished_requests():
        engine.step()
    compiler = engine.core.constrained.manager.compiler
    only_a = SamplingParams(max_tokens=6, structured_outputs=StructuredOutputs.regex("a{1,5}"))
    shared_b = SamplingParams(max_tokens=6, structured_outputs=StructuredOutputs.regex("b{1,5}"))
    gate = threading.Event()
    blockers = [compiler.pool.submit(gate.wait) for _ in range(compiler.pool._max_workers)]
    try:  # the compile threads held: the compiles below wait in the queue
        for request_id, prompt, params in (
            ("a", PROMPTS[1], only_a),
            ("b", PROMPTS[2], shared_b),
            ("b2", PROMPTS[3], shared_b),
        ):
            engine.add_request(request_id, prompt, params.clone(output_kind=RequestOutputKind.FINAL_ONLY))
        compiling = engine.core.constrained.compiling
        compile_a, compile_b = compiling["a"].future, compiling["b"].future
        engine.abort("a")
        engine.abort("b")
    finally:  # the compile threads go on, whatever happened
        gate.set()
    for blocker in blockers:
        blocker.result(timeout=60)
    assert compile_a.cancelled() and not compile_b.cancelled()  # b2 still waits for b's
    finished = {}
    while engine.has_unfinished_requests():
        finished |= {o.request_id: o for o in engine.step() if o.finished}
    assert list(finished) == ["b2"] and re.fullmatch("b{1,5}", finished["b2"].outputs[0].text)
    engine.add_request("a", PROMPTS[1], only_a.clone(output_kind=RequestOutputKind.FINAL_ONLY))  # compiled anew
    while engine.has_unfinished_requests():
        finished |= {o.request_id: o for o in engine.step() if o.finished}
    assert re.fullmatch("a{1,5}", finished["a"].outputs[0].text)


def test_a_request_waiting_for_its_grammar_stalls_no_one(model_dir, monkeypatch):
    """The compile is held (an event) until a free request has run to its end; then the constrained one runs."""
    import threading

    from model_optimizer.runtime.structured.compiler import GrammarCompiler

    release = threading.Event()
    compile_for_real = GrammarCompiler._compile

    def held(self, so):
        assert release.wait(60)
        return compile_for_real(self, so)

    monkeypatch.setattr(GrammarCompiler, "_compile", held)
    engine = LLM(model_dir, kv_cache_memory=1 << 24).engine
    engine.add_request("constrained", PROMPTS[1], CONSTRAINED)
    engine.add_request("free", PROMPTS[2], FREE)
    finished = {}
    while "free" not in finished:
        finished.update({o.request_id: o for o in engine.step() if o.finished})
    assert "constrained" in engine.core.constrained.compiling and "constrained" not in finished
    release.set()
    while engine.has_unfinished_requests():
        finished.update({o.request_id: o for o in engine.step() if o.finished})
    jsonschema.validate(json.loads(finished["constrained"].outputs[0].text), ITEMS)


def test_a_request_id_reused_while_the_aborted_ones_step_is_in_flight_gets_a_fresh_grammar(model_dir):
    """Asynchronous scheduling: the aborted request's last step is still in flight when a new request
    with its id (and a compiled grammar) joins. That step's token belongs to the aborted request and
    must not advance the new request's matcher: the new one gives what it gives alone."""
    engine = LLM(model_dir, kv_cache_memory=1 << 24).engine
    engine.add_request("alone", PROMPTS[1], CONSTRAINED)
    while engine.has_unfinished_requests():
        outputs = engine.step()
    alone = list(outputs[0].outputs[0].token_ids)
    engine.add_request("c", PROMPTS[3], CONSTRAINED)
    while not engine.core.scheduler.running or engine.core._in_flight is None:
        engine.step()
    engine.step()  # a token of "c" taken, the next one in flight
    assert engine.core._in_flight is not None and "c" in engine.core._in_flight.scheduler_output.num_scheduled_tokens
    engine.abort("c")
    engine.add_request("c", PROMPTS[1], CONSTRAINED)
    engine.core.constrained.compiling["c"].future.result()  # compiled: it joins at the next step
    finished = {}
    while engine.has_unfinished_requests():
        finished.update({o.request_id: o for o in engine.step() if o.finished})
    assert list(finished["c"].outputs[0].token_ids) == alone and not engine.core.groups


def test_a_completion_that_ends_before_its_siblings_gives_its_matcher_up(model_dir):
    """One of n completions finished on its own (an abort of `index:request_id`, as a stop string sends)
    must not stay a live row of its constraint: its matcher goes at once, the others keep theirs, and the
    request still finishes whole."""
    engine = LLM(model_dir, kv_cache_memory=1 << 24).engine
    engine.add_request("c", PROMPTS[0], CONSTRAINED.clone(n=2, temperature=1.0, seed=3))
    manager = engine.core.constrained.manager
    while not (manager.has("0:c") and manager.has("1:c")):
        engine.step()
    engine.step()
    engine.abort("1:c")
    assert not manager.has("1:c") and manager.has("0:c")
    assert manager._matchers["0:c"].compiled.live == 1
    while engine.has_unfinished_requests():
        engine.step()
    assert manager.num_matchers == 0 and not engine.core.groups
