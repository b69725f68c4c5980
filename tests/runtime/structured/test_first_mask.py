"""A constraint's first mask is computed in the compile's thread, before any request of it is admitted, and
a step copies it instead of computing it: a heavy grammar's first mask never stalls the batch's step."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from model_optimizer.runtime.engine.request import Request
from model_optimizer.runtime.models.tokenizer import load_tokenizer
from model_optimizer.runtime.sampling_params import SamplingParams
from model_optimizer.runtime.structured import compiler as compiler_module
from model_optimizer.runtime.structured.compiler import GrammarCompiler
from model_optimizer.runtime.structured.manager import StructuredOutputManager
from model_optimizer.runtime.structured.params import StructuredOutputs


@pytest.fixture(scope="module")
def tokenizer():
    from model_optimizer.assets import reference_model_path

    return load_tokenizer(reference_model_path())


class _Recorded:
    """An llguidance matcher (or executor) that records which thread asked it for masks, and for which rows."""

    def __init__(self, inner, log: list) -> None:  # noqa: ANN001
        self._inner, self._log = inner, log

    def compute_bitmask(self) -> bytes:
        self._log.append(("compute_bitmask", threading.current_thread().name))
        return self._inner.compute_bitmask()

    def unsafe_compute_mask_ptr(self, pairs, *args) -> None:  # noqa: ANN001
        self._log.append(("fill", [row for _, row in pairs]))
        self._inner.unsafe_compute_mask_ptr(pairs, *args)

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self._inner, name)


@pytest.mark.parametrize("padding", [5, "to_32"], ids=["vocab+5", "multiple_of_32"])
def test_the_first_mask_is_computed_while_compiling_and_copied_by_the_first_step(tokenizer, monkeypatch, padding):
    """(llguidance's own mask has a word more than the step's rows where 32 divides the vocabulary.)"""
    vocab = len(tokenizer) + 5 if padding == 5 else -(-len(tokenizer) // 32) * 32
    log: list = []
    real_matcher = compiler_module.matcher

    def recorded_matcher(so, ll_tokenizer):  # noqa: ANN001, ANN202
        grammar, template = real_matcher(so, ll_tokenizer)
        return grammar, _Recorded(template, log)

    monkeypatch.setattr(compiler_module, "matcher", recorded_matcher)
    manager = StructuredOutputManager(GrammarCompiler(tokenizer, vocab, frozenset({2})), threads=2)
    try:
        so = StructuredOutputs.json({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})
        compiled = manager.submit(so).result()
        # computed once, in the compile pool, before the compile was done (so before any request was admitted)
        assert [entry for entry in log if entry[0] == "compute_bitmask"] == [("compute_bitmask", log[0][1])] and log[0][
            1
        ].startswith("mopt-grammar")
        assert compiled.first_mask is not None
        other = manager.submit(StructuredOutputs.regex("[0-9]{3}")).result()
        log.clear()

        manager.executor()
        manager._executor = _Recorded(manager._executor, log)
        requests = [Request(f"r{i}", [1, 2], SamplingParams(max_tokens=8)) for i in range(3)]
        manager.start("r0", compiled)
        manager.start("r1", compiled)
        manager.start("r2", other)
        mask = manager.fill(requests)
        assert log == [], "no first mask is computed in the step"
        assert manager.num_first_masks == 3
        fresh = compiled.matcher()
        words = mask.bitmask.shape[1]
        expected = np.frombuffer(fresh.compute_bitmask(), dtype=np.int32)[:words]
        np.testing.assert_array_equal(mask.bitmask[mask.mask_index[0]], expected)
        np.testing.assert_array_equal(mask.bitmask[mask.mask_index[1]], expected)

        # once r0 has taken a token, its mask is computed (by llguidance, for its row alone)
        token = tokenizer.encode("{", add_special_tokens=False)[0]
        requests[0].output_token_ids.append(token)
        assert manager.advance(requests) == []
        mask = manager.fill(requests)
        assert log == [("fill", [int(mask.mask_index[0])])]
        fresh.consume_token(token)
        np.testing.assert_array_equal(
            mask.bitmask[mask.mask_index[0]], np.frombuffer(fresh.compute_bitmask(), dtype=np.int32)[:words]
        )
        assert manager.num_first_masks == 5
    finally:
        manager.close()


def test_a_grammar_that_fails_on_its_first_mask_fails_its_compile(tokenizer, monkeypatch):
    """The first mask's error (a limit met there) fails the compile, so no request of it is admitted."""

    class Failing(_Recorded):
        def is_error(self) -> bool:
            return True

        def get_error(self) -> str:
            return "too many states (limit 1)"

    real_matcher = compiler_module.matcher

    def failing_matcher(so, ll_tokenizer):  # noqa: ANN001, ANN202
        grammar, template = real_matcher(so, ll_tokenizer)
        return grammar, Failing(template, [])

    monkeypatch.setattr(compiler_module, "matcher", failing_matcher)
    compiler = GrammarCompiler(tokenizer, len(tokenizer) + 5, frozenset({2}))
    try:
        with pytest.raises(ValueError, match="too many states"):
            compiler.submit(StructuredOutputs.regex("[a-z]+")).result()
    finally:
        compiler.close()
