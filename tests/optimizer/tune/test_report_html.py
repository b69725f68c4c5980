"""The tune report a person reads: the verdict against the defaults (never a bare "1.28x" from trials too
few or too noisy to rank), MAPE as percentages, each setting with its value and flags, the commands
whole; checked as text and, where Chromium is installed, laid out in a real headless browser."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from model_optimizer.optimizer.tune import report

DEFAULTS = {
    "max_num_seqs": 256,
    "max_num_batched_tokens": 8192,
    "block_size": 16,
    "enable_prefix_caching": True,
    "enable_chunked_prefill": True,
    "async_scheduling": True,
    "scheduling_policy": "fcfs",
}


def _row(number, goodput, counted, settings=None, **flags) -> dict:
    measured = {
        "goodput": goodput,
        "ttft_p99_ms": 700.0,
        "tpot_p99_ms": 120.0,
        "memory_gib": 1.4,
        "cold_start_s": 10.0,
        "output_throughput": 100 * goodput,
        "counted_requests": counted,
    }
    predicted = {"tpot_ms": 12.0, "ttft_ms": 90.0, "output_throughput": 50 * goodput}
    return {
        "number": number,
        "state": "COMPLETE",
        "settings": DEFAULTS | (settings or {}),
        "measured": measured,
        "predicted": predicted,
        "values": [goodput, 700.0, 120.0, 1.4, 10.0],
        **flags,
    }


def _study(tmp_path: Path, counted: int, repeat: float | None = None) -> Path:
    rows = [_row(0, 1.0, counted, baseline=True), _row(1, 1.28, counted, {"max_num_seqs": 64})]
    if repeat is not None:
        rows.append(_row(2, repeat, counted, baseline_repeat=True))
    setup = {"slo": None, "space_notes": ["enforce_eager (CUDA graphs exist only on a GPU)"], "model": None}
    report.write_outputs(tmp_path, report.build_summary(rows, "goodput", None, setup))
    return tmp_path


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def _text(page: str) -> str:
    parser = _Text()
    parser.feed(page)
    return " ".join(" ".join(parser.parts).split())


def test_too_few_requests_is_said_instead_of_a_gain(tmp_path):
    folder = _study(tmp_path, counted=8)
    text = _text((folder / "report.html").read_text())
    assert "1.28x the defaults' goodput, not ranked: the trials counted 8 requests (fewer than 100)" in text
    assert "not ranked" in (folder / "best.yaml").read_text().splitlines()[2]
    assert "The trials ran on the CPU; not searched: enforce_eager" in text


def test_a_gain_beyond_the_noise_of_enough_requests_is_ranked(tmp_path):
    text = _text((_study(tmp_path, counted=200, repeat=1.02) / "report.html").read_text())
    assert "1.28x the defaults' goodput, more than the noise" in text
    tight = _text((_study(tmp_path / "b", counted=200, repeat=1.25) / "report.html").read_text())
    assert "not ranked: within the spread of the defaults measured twice" in tight
    unrepeated = _text((_study(tmp_path / "c", counted=200) / "report.html").read_text())
    assert "not ranked: no noise estimate (give --repeat-baseline" in unrepeated


def test_figures_and_settings_read_as_words_not_json(tmp_path):
    page = (_study(tmp_path, counted=8) / "report.html").read_text()
    text = _text(page)
    assert not re.search(r'\{"|"mape_pct"|\d\.\d{8}', text), "raw JSON or unrounded numbers"
    # MAPE: (12 - 120) / 120 = 90 %; throughput (50 x g) against (100 x g): 50 %
    assert re.search(r"TPOT p99 90\.0 % 90\.0 % 2", text) and re.search(r"output throughput 50\.0 % 50\.0 % 2", text)
    assert "max_num_seqs 64 --max-num-seqs 64 --max-num-seqs 64" in text  # setting, value, mopt, vLLM
    assert "enable_prefix_caching true --enable-prefix-caching --enable-prefix-caching" in text
    assert "All trials Every trial: max_num_batched_tokens 8192, block_size 16" in text  # held once, not per row
    assert re.search(r"<pre>[^<]*--max-num-seqs 64", page)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Chromium is not installed (apt-get install chromium)")
def test_in_a_browser_the_commands_wrap_and_the_page_fits(tmp_path):
    """Laid out by headless Chromium at 800 px: no <pre> scrolls sideways (the command is whole on screen)
    and nothing makes the page wider than the window."""
    folder = _study(tmp_path, counted=8)
    page = (folder / "report.html").read_text()
    probe = (
        "<script>const wide = [...document.querySelectorAll('pre')].filter(p => p.scrollWidth > p.clientWidth + 1);"
        "document.body.dataset.clippedPre = wide.length;"
        "document.body.dataset.pageFits = document.documentElement.scrollWidth <= window.innerWidth;</script>"
    )
    probed = folder / "probed.html"
    probed.write_text(page.replace("</body>", probe + "</body>"))
    dom = subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=800,3000",
            "--virtual-time-budget=5000",
            "--dump-dom",
            probed.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    body = re.search(r"<body([^>]*)>", dom)
    assert body, dom[:500]
    attrs = html.unescape(body.group(1))
    assert 'data-clipped-pre="0"' in attrs and 'data-page-fits="true"' in attrs, attrs
