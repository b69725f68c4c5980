"""Token-budget batching and reading sentence-transformers folders."""

from __future__ import annotations

import json

import pytest

from model_optimizer.runtime.embed.batching import Batcher
from model_optimizer.runtime.embed.st_folder import read_folder_spec


def test_batches_respect_both_budgets_and_cover_every_input():
    lengths = [5, 50, 7, 300, 12, 12, 1, 40]
    batcher = Batcher(max_num_batched_tokens=64, max_num_seqs=3)
    ids = [[7] * n for n in lengths]
    batches = batcher.add(list(range(4)), ids[:4]) + batcher.add(list(range(4, 8)), ids[4:]) + batcher.flush()
    assert sorted(i for b in batches for i in b.rows) == list(range(len(lengths)))
    assert batches[0].rows == [3]  # longer than the budget: alone
    for batch in batches[1:]:
        assert (
            len(batch.rows) <= 3 and batch.num_tokens <= 64 and batch.num_tokens == sum(lengths[i] for i in batch.rows)
        )
        assert [len(t) for t in batch.token_ids] == [lengths[i] for i in batch.rows]
    first_chunk = [lengths[i] for b in batches for i in b.rows if i < 4]
    assert first_chunk == sorted(
        first_chunk, reverse=True
    )  # longest first within a chunk, so a batch holds alike lengths
    assert batcher.flush() == []


def _write(folder, modules, pooling=None, sbert=None):
    (folder / "modules.json").write_text(json.dumps(modules))
    if pooling is not None:
        (folder / "1_Pooling").mkdir(exist_ok=True)
        (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    if sbert is not None:
        (folder / "sentence_bert_config.json").write_text(json.dumps(sbert))


TRANSFORMER = {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}
POOLING = {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}
NORMALIZE = {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}


def test_legacy_and_new_pooling_formats(tmp_path):
    _write(
        tmp_path,
        [TRANSFORMER, POOLING, NORMALIZE],
        {"pooling_mode_lasttoken": True, "pooling_mode_mean_tokens": False},
        {"max_seq_length": 8192, "do_lower_case": False},
    )
    spec = read_folder_spec(tmp_path)
    assert (spec.pooling, spec.normalize, spec.max_seq_length) == ("last", True, 8192)
    _write(tmp_path, [TRANSFORMER, POOLING], {"embedding_dimension": 8, "pooling_mode": "cls", "include_prompt": True})
    spec = read_folder_spec(tmp_path)
    assert (spec.pooling, spec.normalize) == ("cls", False)


def test_plain_folder_declares_nothing(tmp_path):
    spec = read_folder_spec(tmp_path)
    assert spec.pooling is None and spec.normalize is None and spec.max_seq_length is None


@pytest.mark.parametrize(
    ("modules", "pooling", "message"),
    [
        (
            [TRANSFORMER, {"type": "sentence_transformers.models.Dense", "path": "2_Dense"}],
            None,
            "Dense.*not supported",
        ),
        ([TRANSFORMER, POOLING], {"pooling_mode": ["cls", "mean"]}, "exactly one pooling mode"),
        ([TRANSFORMER, POOLING], {"pooling_mode": "weightedmean"}, "weightedmean.*not supported"),
    ],
)
def test_unsupported_folders_are_clear_errors(tmp_path, modules, pooling, message):
    _write(tmp_path, modules, pooling)
    with pytest.raises(ValueError, match=message):
        read_folder_spec(tmp_path)
