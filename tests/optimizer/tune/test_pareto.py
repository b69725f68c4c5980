"""The Pareto front of measured trials and the trade-off --prefer picks; CLI errors before any server."""

from __future__ import annotations

import pytest

from model_optimizer.cli.main import main
from model_optimizer.optimizer.bench.client import RequestRecord
from model_optimizer.optimizer.bench.metrics import SloThreshold, slo_check
from model_optimizer.optimizer.tune.objectives import slo_violation
from model_optimizer.optimizer.tune.pareto import choose, dominates, pareto_front


def row(number, goodput, ttft, tpot, memory, cold, constraints=(), state="COMPLETE"):
    measured = {
        "goodput": goodput,
        "ttft_p99_ms": ttft,
        "tpot_p99_ms": tpot,
        "memory_gib": memory,
        "cold_start_s": cold,
    }
    return {
        "number": number,
        "state": state,
        "values": [goodput, ttft, tpot, memory, cold],
        "constraints": list(constraints),
        "measured": measured,
        "settings": {},
    }


def test_dominance_follows_each_objective_direction():
    assert dominates([2, 10, 10, 1, 1], [1, 10, 10, 1, 1])  # more goodput, the rest equal
    assert not dominates([2, 10, 10, 1, 1], [1, 5, 10, 1, 1])  # more goodput but slower TTFT
    assert not dominates([1, 10, 10, 1, 1], [1, 10, 10, 1, 1])  # equal is not better


def test_front_keeps_only_trials_meeting_the_slo_when_any_does():
    rows = [
        row(0, 10, 100, 10, 5, 3, constraints=[-1]),
        row(1, 50, 100, 10, 5, 3, constraints=[5]),
        row(2, 8, 100, 10, 5, 3, constraints=[-1]),
        row(3, 9, 50, 10, 5, 3, constraints=[-1]),
        row(4, 99, 1, 1, 1, 1, state="FAIL"),
    ]
    assert [r["number"] for r in pareto_front(rows)] == [0, 3]  # 1 misses the SLO; 2 is dominated by 0
    missed = [row(0, 1, 10, 10, 5, 3, constraints=[1]), row(1, 2, 10, 10, 5, 3, constraints=[1])]
    assert [r["number"] for r in pareto_front(missed)] == [1]  # none met it: the best of the rest


def test_prefer_picks_from_the_front():
    front = [row(0, 10, 100, 20, 8, 3), row(1, 5, 40, 15, 9, 3), row(2, 7, 90, 25, 2, 3)]
    assert choose(front, "goodput")["number"] == 0
    assert choose(front, "latency")["number"] == 1
    assert choose(front, "memory")["number"] == 2
    assert choose([], "goodput") is None
    with pytest.raises(ValueError, match="--prefer must be one of goodput, latency, memory"):
        choose(front, "cheapest")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--trials", "2", "--set", "max_num_seqz=4"], "unknown setting 'max_num_seqz'"),
        (["--set", "max_num_seqs=4"], "give a budget: --trials N and/or --time 30m"),
        (["--time", "soon"], "--time takes seconds or a number with s, m or h"),
        (["--trials", "2", "--slo", "ttft=fast"], "slo term 'ttft=fast'"),
        (["--trials", "0"], "--trials must be a positive integer"),
        (["--resume", "--trials", "2"], "tune.json does not exist"),
        (["--trials", "2", "--sampler", "grid", "--space", "RANGE"], "--sampler grid needs a list of choices"),
        (["--trials", "2", "--server-cmd", "srv --port {port} {flags} --x {bogus}"], "names {bogus}, which is not set"),
        (["--trials", "2", "--server-cmd", "srv --port {port}"], "does not pass on searched knob"),
        (["--trials", "2", "--set", "device=cpu", "--space", "GPU"], "where no knob of the space changes anything"),
    ],
)
def test_bad_input_is_one_line_before_any_server(tmp_path, capsys, argv, message):
    space = tmp_path / "range.yaml"
    space.write_text("max_num_seqs: {low: 4, high: 64}\n")
    gpu_only = tmp_path / "gpu.yaml"
    gpu_only.write_text("gpu_memory_utilization: [0.8, 0.9]\nenforce_eager: [true, false]\n")
    argv = [str(space) if a == "RANGE" else str(gpu_only) if a == "GPU" else a for a in argv]
    assert main(["tune", "--output-dir", str(tmp_path / "out"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mopt tune: error:") and message in err.replace("\n", " ")
    assert not (tmp_path / "out" / "trials").exists()


def test_set_holds_a_setting_and_fix_is_its_deprecated_alias(tmp_path, capsys):
    """`mopt inspect --fix OUT` writes a cleaned copy; tune holds settings with --set (--fix still works, warned)."""
    from model_optimizer.cli.main import build_parser
    from model_optimizer.cli.tune import _fresh

    args = build_parser().parse_args(["tune", "--set", "max_num_seqs=8", "--fix", "block_size=32"])
    space = _fresh(args)["space"]
    assert space["fixed"] == {"max_num_seqs": 8, "block_size": 32}
    assert "--fix NAME=VALUE is deprecated, use --set NAME=VALUE" in capsys.readouterr().err
    assert main(["tune", "--output-dir", str(tmp_path), "--trials", "2", "--fix", "max_num_seqz=4"]) == 2
    err = capsys.readouterr().err
    assert "deprecated, use --set" in err and "unknown setting 'max_num_seqz'" in err


def test_num_warmups_help_names_one_default():
    from model_optimizer.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["tune"]
    text = " ".join(sub.format_help().split())
    start = text.index("--num-warmups N ")
    help_text = text[start : text.index("--", start + 16)]
    assert "default: max(2 x the clients in flight, 32)" in help_text and "(default: 0)" not in help_text
    assert text.count("max(2 x") == 1  # said once, where the flag is


def test_a_statistic_made_infinite_by_failures_is_graded_not_unmeasured():
    """One timeout among 100 makes a mean infinite (metrics.slo_check: measured_ms None, share_over_limit
    0.01): the constraint was 1e6, as for a trial with nothing measured, so NSGA-II could not tell it
    from a dead one."""
    records = []
    for i in range(100):
        r = RequestRecord(i, 8, 8)
        r.send, r.end, r.chunk_times, r.output_tokens = 0.0, 0.1, [0.05, 0.1], 8
        if i == 0:
            r.error = "timeout"
        records.append(r)
    limit = 0.2
    one_failed = slo_check(records, SloThreshold("ttft", "mean", limit))
    for r in records[1:10]:
        r.error = "timeout"
    ten_failed = slo_check(records, SloThreshold("ttft", "mean", limit))
    assert one_failed["measured_ms"] is None and one_failed["share_over_limit"] == 0.01
    graded = [slo_violation(c, limit * 1e3) for c in (one_failed, ten_failed)]
    assert 0 < graded[0] < graded[1] < slo_violation({}, limit * 1e3) == 1e6
