"""The predictor-guided choice of the next trial: best predicted first, nothing tried twice, nothing that
cannot fit, a moot knob last among equals; and a guided study that measures its picks even when the
model says they miss the SLO."""

from __future__ import annotations

import pytest

from model_optimizer.optimizer.tune.budget import Budget
from model_optimizer.optimizer.tune.guide import predicted_goodput, rank
from model_optimizer.optimizer.tune.hardware import Hardware
from model_optimizer.optimizer.tune.model_cost import model_cost
from model_optimizer.optimizer.tune.predictor import Predictor, Workload
from model_optimizer.optimizer.tune.space import Knob, SearchSpace
from model_optimizer.optimizer.tune.study import open_study
from model_optimizer.optimizer.tune.tuner import Tuner

CONFIG = dict(
    num_hidden_layers=2,
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=128,
    vocab_size=100,
    max_position_embeddings=512,
)
CPU = Hardware("cpu", 20.0, 0.2, 16.0, False, "test")


def _predictor() -> Predictor:
    return Predictor(model_cost(CONFIG), CPU)


def test_rank_puts_the_best_predicted_first_and_leaves_out_tried_and_misfits():
    """4 clients: running 4 at once spreads each step's fixed cost over more tokens than 1 or 2 do; one KV
    block (16 tokens) cannot hold a 24-token request."""
    space = SearchSpace([Knob("max_num_seqs", choices=[1, 2, 4]), Knob("num_kv_blocks", choices=[1, 32])])
    load = Workload(16, 8, concurrency=4)
    ranked = rank(space, _predictor(), load, {}, tried=[], measured=[])
    assert [r.params for r in ranked] == [
        {"max_num_seqs": n, "num_kv_blocks": 32} for n in (4, 2, 1)
    ]  # the one-block candidates are gone
    assert ranked[0].score > ranked[1].score > ranked[2].score
    tried = [space.settings({"max_num_seqs": 4, "num_kv_blocks": 32})]
    assert rank(space, _predictor(), load, {}, tried, [])[0].params == {"max_num_seqs": 2, "num_kv_blocks": 32}


def test_a_moot_knob_comes_last_among_equally_good_candidates():
    """2 clients: max_num_seqs 4 or 8 changes nothing the model can see, an fp8 cache changes its bytes a
    little: within the tie both score alike, and the one predicted to behave differently is measured."""
    predictor = _predictor()
    space = SearchSpace([Knob("max_num_seqs", choices=[2, 4, 8]), Knob("kv_cache_dtype", choices=["auto", "fp8"])])
    load = Workload(16, 8, concurrency=2)
    measured_settings = space.settings({"max_num_seqs": 8, "kv_cache_dtype": "auto"})
    measured = [predictor.predict(measured_settings, load)]
    ranked = rank(space, predictor, load, {}, [measured_settings], measured)
    assert [r.params["kv_cache_dtype"] for r in ranked] == ["fp8"] * 3 + ["auto"] * 2


def test_predicted_goodput_counts_the_share_expected_to_meet_the_slo():
    pred = _predictor().predict({"num_kv_blocks": 32}, Workload(16, 8, concurrency=2))
    rate = pred.output_throughput / 8
    assert predicted_goodput(pred, {}) == rate
    assert abs(predicted_goodput(pred, {"tpot": pred.tpot_ms}) - 0.99 * rate) < 1e-3 * rate  # at the p99
    assert predicted_goodput(pred, {"tpot": pred.tpot_ms / 3}) < 1e-6 * rate  # far over: ~0


@pytest.mark.slow
def test_guided_study_measures_the_baseline_then_the_predictors_picks(tmp_path):
    """Trial 0 is the defaults, trials 1 and 2 the predictor's best untried candidates, measured even
    though the model predicts every candidate to miss an impossible SLO (`false` is no server, so each
    trial fails fast; the choice is what is checked)."""
    from model_optimizer.optimizer.bench.client import ClientConfig
    from model_optimizer.optimizer.bench.load import LoadConfig
    from model_optimizer.optimizer.bench.workloads import WorkloadConfig
    from model_optimizer.optimizer.tune.trial import TrialSetup

    setup = TrialSetup(
        None,
        ClientConfig(),
        WorkloadConfig(prompt_len="64", output_len="16"),
        LoadConfig(num_requests=2, concurrency=1),
        slo="tpot_p99=0.001ms",
        server_cmd="false",
    )
    space = SearchSpace(
        [
            Knob("max_num_batched_tokens", choices=[2048, 8192]),
            Knob("max_num_seqs", choices=[64, 256]),
            Knob("kv_cache_dtype", choices=["auto", "fp8"]),
        ],
        {"num_kv_blocks": 64},
    )
    study = open_study(tmp_path, seed=0, resume=False)
    tuner = Tuner(study, space, setup, tmp_path, _predictor(), guided=True)
    assert tuner.enqueue_defaults()
    tuner.run(Budget(trials=3))
    trials = study.trials
    assert [t.state.name for t in trials] == ["FAIL", "FAIL", "FAIL"]  # measured (no server), none skipped
    assert trials[0].user_attrs["baseline"] and trials[0].params == {
        "max_num_batched_tokens": 8192,
        "max_num_seqs": 256,
        "kv_cache_dtype": "auto",
    }
    assert [t.user_attrs.get("picked_by") for t in trials[1:]] == ["predictor", "predictor"]
    settings = [t.user_attrs["settings"] for t in trials]
    assert len({str(s) for s in settings}) == 3  # three different candidates
