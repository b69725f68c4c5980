"""Metric math on hand-written timestamp streams."""

import numpy as np
import pytest

from model_optimizer.optimizer.bench.client import RequestRecord
from model_optimizer.optimizer.bench.metrics import distribution, itls, meets_slos, parse_slo, summarize, tpot


def record(index, send, chunks, end, output_tokens=None, error=None, prompt_len=10):
    rec = RequestRecord(index, prompt_len, 4, scheduled=send, send=send, end=end, chunk_times=list(chunks))
    rec.output_tokens = len(chunks) if output_tokens is None else output_tokens
    rec.error = error
    return rec


def test_distribution_matches_linear_percentiles():
    values = np.arange(1, 101) / 1000.0  # 1..100 ms
    d = distribution(values)
    assert d["mean"] == pytest.approx(50.5)
    assert d["p50"] == pytest.approx(50.5)
    assert d["p90"] == pytest.approx(90.1)
    assert d["p99"] == pytest.approx(99.01)
    assert d["max"] == pytest.approx(100.0)
    assert d["count"] == 100
    assert distribution([])["p99"] is None


def test_ttft_tpot_itl_of_one_stream():
    rec = record(0, 1.0, [1.1, 1.12, 1.15, 1.19], 1.2)
    assert rec.ttft == pytest.approx(0.1)
    assert tpot(rec) == pytest.approx((0.2 - 0.1) / 3)
    assert itls(rec) == pytest.approx([0.02, 0.03, 0.04])


def test_tpot_uses_usage_token_count_not_chunks():
    # two chunks but the server reported 5 tokens: TPOT divides by 4
    rec = record(0, 0.0, [0.1, 0.3], 0.5, output_tokens=5)
    assert tpot(rec) == pytest.approx(0.4 / 4)
    assert tpot(record(1, 0.0, [0.1], 0.2)) is None  # one token: TPOT undefined


def test_summary_counts_failures_in_denominators():
    records = [
        record(0, 0.0, [0.1, 0.2], 0.3),
        record(1, 0.5, [0.7, 0.75], 0.8),
        record(2, 1.0, [], 2.0, error="http_500"),
        record(3, 1.5, [], 1.6, error="timeout"),
    ]
    s = summarize(records)
    assert s["num_requests"] == 4 and s["num_ok"] == 2 and s["num_failed"] == 2
    assert s["errors"] == {"http_500": 1, "timeout": 1}
    assert s["duration_s"] == pytest.approx(2.0)
    assert s["request_rate"] == pytest.approx(1.0)
    assert s["attempted_rate"] == pytest.approx(2.0)
    assert s["success_rate"] == pytest.approx(0.5)
    assert s["output_tokens"] == 4
    assert s["output_throughput"] == pytest.approx(2.0)
    assert s["total_throughput"] == pytest.approx((20 + 4) / 2.0)
    assert s["ttft_ms"]["count"] == 2
    assert s["ttft_ms"]["mean"] == pytest.approx(150.0)
    assert s["itl_ms"]["max"] == pytest.approx(100.0)
    assert s["e2e_ms"]["max"] == pytest.approx(300.0)


def test_goodput_counts_requests_meeting_every_threshold():
    records = [
        record(0, 0.0, [0.05, 0.06, 0.07], 0.08),  # ttft 50 ms, tpot 15 ms: good
        record(1, 0.0, [0.30, 0.31, 0.32], 0.33),  # ttft 300 ms: bad
        record(2, 0.0, [0.05, 0.15, 0.25], 0.35),  # tpot 150 ms: bad
        record(3, 0.0, [0.05], 1.0),  # one token: TPOT undefined, TTFT fine: good
        record(4, 0.0, [], 0.5, error="connection"),  # failed: never good
    ]
    slos = parse_slo("ttft_p99=200ms,tpot_p99=30ms")
    assert [meets_slos(r, slos) for r in records] == [True, False, False, True, False]
    s = summarize(records, slos)
    assert s["num_good"] == 2
    assert s["goodput"] == pytest.approx(2 / 1.0)
    assert s["slo_attainment"] == pytest.approx(2 / 5)
    assert s["slo_checks"]["ttft_p99"]["met"] is False
    assert s["slo_met"] is False


def test_slo_check_treats_failures_as_slow():
    fast = [record(i, 0.0, [0.01, 0.02], 0.03) for i in range(99)]
    slos = parse_slo("ttft_p99=100ms")
    assert summarize(fast + [record(99, 0, [], 0.1, error="timeout")], slos)["slo_met"] is True
    two_failed = fast + [record(99 + i, 0, [], 0.1, error="timeout") for i in range(2)]
    assert summarize(two_failed, slos)["slo_met"] is False


def test_a_tpot_slo_of_one_token_answers_is_met_as_goodput_counts_them():
    one_token = [record(i, 0.0, [0.01], 0.01, output_tokens=1) for i in range(5)]
    out = summarize(one_token, parse_slo("tpot_p99=50ms"))
    check = out["slo_checks"]["tpot_p99"]
    assert check["met"] is True and check["undefined"] is True and out["slo_met"] is True
    assert out["goodput"] > 0
    failed = [record(0, 0, [], 0.1, error="timeout")]
    assert summarize(failed, parse_slo("tpot_p99=50ms"))["slo_met"] is False


def test_parse_slo_units_and_errors():
    terms = parse_slo("ttft_p99=0.2s, tpot=30, itl_p90=500us,e2e_max=2s")
    assert [(t.metric, t.stat, t.limit) for t in terms] == [
        ("ttft", "p99", 0.2),
        ("tpot", "p99", 0.030),
        ("itl", "p90", 0.0005),
        ("e2e", "max", 2.0),
    ]
    for bad in ("ttft_p98=1ms", "latency=3ms", "ttft_p99=fast", "ttft_p99=3h"):
        with pytest.raises(ValueError, match="slo term"):
            parse_slo(bad)


def test_itl_slo_uses_the_requests_own_statistic():
    rec = record(0, 0.0, [0.01, 0.02, 0.03, 0.2], 0.2)  # gaps 10, 10, 170 ms
    assert meets_slos(rec, parse_slo("itl_p50=20ms"))
    assert not meets_slos(rec, parse_slo("itl_max=100ms"))


def test_slo_check_is_one_percentile_over_all_requests():
    """196 fast, 2 slow and 2 failed of 200: 4 % are failed or over the limit, so a p99 check fails (the p99
    of the successes alone was fast, and the 1 % failures alone were allowed: each looked fine)."""
    fast = [record(i, 0.0, [0.1, 0.11], 0.4) for i in range(196)]
    slow = [record(196 + i, 0.0, [0.3, 0.31], 0.4) for i in range(2)]
    failed = [record(198 + i, 0.0, [], 0.4, error="timeout") for i in range(2)]
    check = summarize(fast + slow + failed, parse_slo("ttft_p99=200ms"))["slo_checks"]["ttft_p99"]
    assert check["met"] is False and check["share_over_limit"] == pytest.approx(0.02)
    assert check["measured_ms"] == pytest.approx(300.0)  # the 198th of 200 smallest TTFTs
    one_slow = fast + [record(196, 0.0, [0.3, 0.31], 0.4)] + [record(197 + i, 0.0, [0.1], 0.4) for i in range(3)]
    check = summarize(one_slow, parse_slo("ttft_p99=200ms"))["slo_checks"]["ttft_p99"]
    assert check["met"] is True and check["measured_ms"] == pytest.approx(100.0)


def test_an_slo_check_made_infinite_by_failures_stays_valid_json():
    import json

    records = [record(i, 0.0, [0.01, 0.02], 0.03) for i in range(97)]
    records += [record(97 + i, 0.0, [], 0.1, error="timeout") for i in range(3)]
    s = summarize(records, parse_slo("ttft_p99=100ms,e2e_mean=1s"))
    for key in ("ttft_p99", "e2e_mean"):  # failed requests are infinitely slow: p99 and mean are infinite
        check = s["slo_checks"][key]
        assert check["met"] is False and check["measured_ms"] is None and check["share_over_limit"] > 0
    json.dumps(s, allow_nan=False)  # no Infinity, which is not JSON
