"""The rendered report prints data text as it is: rich reads `[...]` as markup, which cut `[signed-by=...]`
out of an apt line and `[code 999]` out of an NVML error."""

from __future__ import annotations

import io

import doctor_edits as E
import pytest
from rich.console import Console

from model_optimizer.environment import evaluate, recommended_settings
from model_optimizer.environment.explain import explain
from model_optimizer.environment.report import print_explain, print_report, report_document


def _docker_without_toolkit(snap):
    E.data(snap, "container_toolkit").update(
        {
            "in_container": False,
            "docker": {
                "found": True,
                "rc": 0,
                "daemon_reachable": True,
                "runtimes": '{"runc":{"path":"runc"}}',
                "default_runtime": "runc",
            },
        }
    )
    return snap


def _nvml_unknown_error(snap):
    E.nvml_fails(snap, "NVMLError_Unknown", "Unknown Error [code 999]")
    E.torch_without_gpu(snap, "RuntimeError: CUDA unknown error")
    return snap


def _rendered(width: int, render) -> list[str]:
    buf = io.StringIO()
    render(Console(file=buf, width=width, color_system=None))
    return buf.getvalue().splitlines()


@pytest.mark.parametrize("edit", [_docker_without_toolkit, _nvml_unknown_error])
def test_printed_titles_and_fixes_equal_the_rules_text(edit):
    snap = edit(E.gpu_base())
    findings = evaluate(snap)
    doc = report_document(snap, findings, recommended_settings(snap))
    lines = _rendered(1000, lambda console: print_report(console, doc, "debian"))
    shown = [f for f in findings if f.severity != "ok"]
    assert any("[" in c for f in shown for c in [f.title, *f.fix_for("debian")])  # the case under test
    for f in shown:
        assert f"■ {f.title}" in lines
        assert f"  why: {f.why}" in lines
        for command in f.fix_for("debian"):
            assert f"  $ {command}" in lines or f"  - {command}" in lines, command


def test_explained_fix_keeps_its_brackets():
    (match, *_) = explain("container_no_gpu_runtime")
    lines = _rendered(1000, lambda console: print_explain(console, "", [match], "debian"))
    sed = next(c for c in match.fix["debian"] if "[signed-by=" in c)
    assert f"   $ {sed}" in lines
    assert all(f"   - {cause}" in lines for cause in match.causes)
