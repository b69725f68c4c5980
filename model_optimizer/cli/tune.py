"""`mopt tune`: search serve settings for the Pareto front of goodput, latency, memory and cold start.

Each trial is a real `mopt serve` (or `--server-cmd`) process measured by `mopt bench`'s own code;
the study lives in OUTPUT_DIR/study.db (`--resume` continues it). `mopt tune translate best.yaml
--to vllm` prints the `vllm serve` command for a tuned configuration.
"""

from __future__ import annotations

import argparse
import dataclasses
import math

from model_optimizer.cli.args import add_dataclass_args, dataclass_from_args

CLIENT_SKIP = ("base_url", "model")
MAX_SEED = 2**32 - 1
"""The samplers' seeds (numpy's legacy RandomState, which optuna uses) are 32-bit."""
RESUMABLE = {"trials", "time", "prefer", "resume", "output_dir", "words", "to"}
"""Flags a --resume may give; every other setting comes from the stored study."""


def add_parser(subparsers) -> argparse.ArgumentParser:
    from model_optimizer.optimizer.bench.client import ClientConfig
    from model_optimizer.optimizer.bench.load import LoadConfig
    from model_optimizer.optimizer.bench.workloads import WorkloadConfig
    from model_optimizer.optimizer.tune.pareto import PREFER_CHOICES
    from model_optimizer.optimizer.tune.samplers import SAMPLERS

    parser = subparsers.add_parser(
        "tune",
        help="search engine settings for the most goodput under an SLO, measured on real servers",
        description="Search serve settings (max_num_seqs, max_num_batched_tokens, block_size, ...) with an optuna "
        "multi-objective study: each trial starts a real server with the candidate settings, times its cold start, "
        "loads it as `mopt bench` does and records goodput, p99 TTFT/TPOT, memory and cold start. Writes "
        "study.db, results.json, report.html, best.yaml and the mopt/vllm commands to --output-dir. "
        "`mopt tune translate best.yaml --to vllm` prints the vllm serve command for a best.yaml.",
    )
    parser.add_argument(
        "words",
        nargs="*",
        metavar="translate FILE",
        help="`translate best.yaml --to vllm`: print the command for a tuned configuration",
    )
    parser.add_argument("--to", choices=("vllm", "mopt"), default=None, help="translate: the server to translate to")
    parser.add_argument("--model", default=None, help="model folder (default: the built-in model)")
    parser.add_argument("--output-dir", default="tune-results", help="folder of the study and its reports")
    parser.add_argument("--trials", type=int, default=None, help="measured trials the study should hold in all")
    parser.add_argument("--time", default=None, help="time budget of this run: seconds, or 30m, 1.5h")
    parser.add_argument("--seed", type=int, default=None, help="seed of the sampler and the workload (default 0)")
    parser.add_argument("--resume", action="store_true", default=None, help="continue the study in --output-dir")
    parser.add_argument(
        "--sampler",
        choices=SAMPLERS,
        default=None,
        help="nsga2 (default), tpe (multi-objective TPE), or grid: every combination of the knobs' "
        "choices (vLLM auto_tune's method; the budget defaults to the grid's size)",
    )
    parser.add_argument(
        "--prefer",
        choices=PREFER_CHOICES,
        default=None,
        help="which Pareto trade-off best.yaml holds (default goodput)",
    )
    parser.add_argument("--slo", default=None, help="SLOs as in mopt bench, e.g. ttft_p99=500ms,tpot_p99=40ms")
    parser.add_argument("--space", default=None, help="YAML file of knobs: name: [values] or name: {low, high, log}")
    parser.add_argument(
        "--set",
        dest="set",
        action="append",
        default=None,
        metavar="NAME=VALUE",
        help="hold a setting (any mopt serve flag name) at a value instead of searching it; repeatable",
    )
    parser.add_argument(
        "--fix", dest="fix", action="append", default=None, metavar="NAME=VALUE", help="deprecated: --set"
    )
    parser.add_argument(
        "--server-cmd",
        default=None,
        metavar="TEMPLATE",
        help="tune an external OpenAI-compatible server: a command with {model}, {port}, {host}, "
        "{flags}, {vllm_flags}, {python} and {SETTING} placeholders",
    )
    parser.add_argument(
        "--ready-path", default=None, help="path polled until 200 (default /ready; /v1/models with --server-cmd)"
    )
    parser.add_argument("--ready-timeout", type=float, default=None, help="seconds to ready before a trial fails (600)")
    parser.add_argument("--trial-timeout", type=float, default=None, help="seconds of load before a trial fails (1800)")
    parser.add_argument("--gpu", default=None, help="datasheet of the GPU for the predictor (default: the visible one)")
    parser.add_argument(
        "--hardware",
        default=None,
        metavar="FILE",
        help="`mopt doctor --bench --json` output: measured bandwidth and matmul peak for the predictor",
    )
    parser.add_argument("--no-predict", action="store_true", default=None, help="measure every candidate")
    parser.add_argument(
        "--no-baseline", action="store_true", default=None, help="do not measure the default settings first"
    )
    parser.add_argument(
        "--no-guide",
        action="store_true",
        default=None,
        help="let the sampler draw every trial (default: after the baseline, measure the predictor's best "
        "untried candidate; every 4th trial is still the sampler's)",
    )
    parser.add_argument(
        "--repeat-baseline",
        action="store_true",
        default=None,
        help="measure the default settings again as the budget's last trial and report the spread of the two: "
        "a best trial closer to the defaults than that is reported as within noise",
    )
    parser.add_argument(
        "--count-first-wave",
        action="store_true",
        default=None,
        help="closed loop: count every measured request (default: leave out the first CONCURRENCY, the "
        "start-up burst where all clients send at once; the warm-up, --num-warmups, is never counted)",
    )
    add_dataclass_args(parser, ClientConfig, skip=CLIENT_SKIP)
    add_dataclass_args(parser, WorkloadConfig, skip=("seed",))
    add_dataclass_args(parser, LoadConfig, skip=("num_warmups",))
    parser.add_argument(
        "--num-warmups",
        type=int,
        default=None,
        metavar="N",
        help="requests sent to each trial's server before it is measured, not counted (default: max(2 x the "
        "clients in flight, 32): the start-up burst and one more wave; `mopt bench` sends none by default)",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    if args.words:
        return _translate(args)
    if args.to is not None:
        raise ValueError("--to belongs to `mopt tune translate FILE --to vllm`")
    from pathlib import Path

    from rich.console import Console

    from model_optimizer.common.fileio import check_writable_folder_path
    from model_optimizer.optimizer.tune import runner

    console = Console()
    console.soft_wrap = not console.is_terminal  # piped: whole lines (a resume command cut at 80 columns ran no study)
    check_writable_folder_path(args.output_dir, "--output-dir")  # before the first trial, not after it
    output_dir = Path(args.output_dir)
    if args.resume:
        given = sorted(
            k
            for k, v in vars(args).items()
            if v is not None and k not in RESUMABLE and k not in ("handler", "command", "debug", "config_classes")
        )
        if given:
            raise ValueError(
                "--resume continues the stored study with its own settings; drop "
                + ", ".join("--" + g.replace("_", "-") for g in given)
                + " (only --trials, --time and "
                "--prefer may change)"
            )
        stored = runner.load_stored(output_dir)
    else:
        stored = _fresh(args)
    budget = runner.budget_of(args.trials, args.time, stored.get("sampler", "nsga2"))
    try:
        return runner.tune(stored, output_dir, budget, args.prefer or "goodput", bool(args.resume), console)
    except Exception as exc:
        reason = storage_failure(exc)
        if reason is None:
            raise
        raise ValueError(
            f"{output_dir / 'study.db'}: {reason}; the study so far is kept: once the file can be written, "
            f"continue it with mopt tune --resume --output-dir {output_dir}"
        ) from exc


def storage_failure(exc: BaseException) -> str | None:
    """The SQLite error under a failure of the study's storage (a read-only study.db, a full disk: optuna's
    StorageInternalError over sqlalchemy's over sqlite3's), or None when `exc` is none."""
    import sqlite3

    from optuna.exceptions import StorageInternalError
    from sqlalchemy.exc import DBAPIError

    if not isinstance(exc, (StorageInternalError, DBAPIError)):
        return None
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, sqlite3.Error):
            return str(cause)
        cause = cause.__cause__ or cause.__context__
    return str(exc).splitlines()[0]


def _fresh(args: argparse.Namespace) -> dict:
    """The study's stored form, built and checked from the flags."""
    from model_optimizer.optimizer.bench.client import ClientConfig
    from model_optimizer.optimizer.bench.load import LoadConfig
    from model_optimizer.optimizer.bench.workloads import WorkloadConfig
    from model_optimizer.optimizer.tune.device_space import fit_to_cpu, trials_on_cpu
    from model_optimizer.optimizer.tune.space import build_space
    from model_optimizer.optimizer.tune.steady import default_warmups

    seed = 0 if args.seed is None else args.seed
    if not 0 <= seed <= MAX_SEED:  # optuna's message named no flag, after the study was made
        raise ValueError(f"--seed must be in 0..{MAX_SEED} (the sampler's range), got {seed}")
    for flag, value in (("--ready-timeout", args.ready_timeout), ("--trial-timeout", args.trial_timeout)):
        if value is not None and not 0 < value < math.inf:  # NaN too: "not ready within nan s"
            raise ValueError(f"{flag} must be a positive number of seconds, got {value}")
    if args.server_cmd is None:  # tune serves --model itself; an external server's {model} may be any name
        check_model(args.model)
    check_slo(args.slo)
    space = build_space(args.space, held_settings(args))
    searched = len(space.knobs)
    notes = fit_to_cpu(space) if trials_on_cpu(args.server_cmd, space.fixed) else []
    if searched and not space.knobs:
        raise ValueError(
            "the trials run on the CPU, where no knob of the space changes anything ("
            + "; ".join(notes)
            + "): search max_num_seqs, max_num_batched_tokens or enable_prefix_caching instead"
        )
    load = dataclass_from_args(LoadConfig, args)
    if args.num_warmups is None:  # the bench's default is none; a trial's first requests are never representative
        load.num_warmups = default_warmups(load)
    return {
        "model": stored_model(args.model),
        "space": space.to_dict(),
        "space_notes": notes,
        "slo": args.slo,
        "seed": seed,
        "client": dataclasses.asdict(dataclass_from_args(ClientConfig, args, model=None)),  # --model is the folder
        "workload": dataclasses.asdict(dataclass_from_args(WorkloadConfig, args, seed=seed)),
        "load": dataclasses.asdict(load),
        "server_cmd": args.server_cmd,
        "ready_path": args.ready_path or ("/v1/models" if args.server_cmd else "/ready"),
        "ready_timeout": args.ready_timeout or 600.0,
        "trial_timeout": args.trial_timeout or 1800.0,
        "sampler": args.sampler or "nsga2",
        "gpu": args.gpu,
        "hardware": args.hardware,
        "predict": not args.no_predict,
        "baseline": not args.no_baseline,
        "guided": not args.no_guide,
        "skip_first_wave": not args.count_first_wave,
        "repeat_baseline": bool(args.repeat_baseline),
    }


def stored_model(model: str | None) -> str | None:
    """`--model` as the study stores it: a local folder as an absolute path, so a `--resume` from another
    folder, best.yaml and commands.txt still name it; a Hub id (or any name a --server-cmd takes) as given."""
    import os
    from pathlib import Path

    if model is None or not Path(model).expanduser().is_dir():
        return model
    return os.path.abspath(Path(model).expanduser())


def check_slo(spec: str | None) -> None:
    """ValueError naming --slo for a term bench's parser refuses, a limit that is not positive (no request
    meets 0) or a term given twice (one of the two would be dropped without a word)."""
    from model_optimizer.optimizer.bench.metrics import parse_slo

    try:
        terms = parse_slo(spec)
    except ValueError as exc:
        if "could not convert" in str(exc):  # float()'s own words, about `1.2.3`
            raise ValueError(f"--slo {spec}: each limit must be a number with ms, s or us (e.g. 200ms)") from None
        raise ValueError(f"--slo {spec}: {exc}") from None
    seen = set()
    for term in terms:
        if not term.limit > 0:
            raise ValueError(f"--slo {spec}: {term.key} must be a positive time, got {term.limit:g} s")
        if term.key in seen:
            raise ValueError(f"--slo {spec}: {term.key} is given twice; give each term once")
        seen.add(term.key)


def check_model(model: str | None) -> None:
    """ValueError or FileNotFoundError, before the study is made, for a model `mopt serve` could not load:
    a missing folder, no readable config.json, a truncated safetensors file (each trial would fail)."""
    from model_optimizer.runtime.hub import resolve_model_dir
    from model_optimizer.runtime.models.checkpoint_reader import check_safetensors_header
    from model_optimizer.runtime.models.model_config import read_config

    folder = resolve_model_dir(model)
    read_config(folder)  # present, JSON, naming a model: as serve reads it
    for weights in sorted(folder.glob("*.safetensors")):
        check_safetensors_header(weights)


def held_settings(args: argparse.Namespace) -> list[str]:
    """--set values, and the deprecated --fix ones with a warning: `inspect --fix OUT` writes a cleaned
    copy, so one flag name meant two things."""
    import sys

    if args.fix:
        print(
            "mopt tune: --fix NAME=VALUE is deprecated, use --set NAME=VALUE (`mopt inspect --fix` writes a "
            "cleaned copy of a checkpoint)",
            file=sys.stderr,
        )
    return [*(args.set or []), *(args.fix or [])]


def _translate(args: argparse.Namespace) -> int:
    import shlex

    from rich.console import Console
    from rich.table import Table

    from model_optimizer.cli.args import read_config_file
    from model_optimizer.optimizer.tune.commands import mopt_serve_argv, vllm_serve
    from model_optimizer.runtime.config import EngineConfig
    from model_optimizer.runtime.server.config import ServerConfig

    words = args.words
    if words[0] != "translate" or len(words) != 2:
        raise ValueError(
            "`mopt tune` takes flags only, or `mopt tune translate best.yaml --to vllm`; got " + " ".join(words)
        )
    values = read_config_file(words[1], (EngineConfig, ServerConfig))
    check_settings(words[1], values)  # as `mopt deploy --config` and `mopt serve --config` check them
    model = values.pop("model", None)
    console = Console()
    if (args.to or "vllm") == "mopt":
        print(shlex.join(mopt_serve_argv(model, values)))
        return 0
    vllm = vllm_serve(model, values)
    print(shlex.join(vllm.argv))
    table = Table(title="settings -> vllm serve")
    for col in ("setting", "value", "vLLM flag"):
        table.add_column(col)
    for name, value in values.items():
        flag = vllm.translated.get(name) or f"[yellow]not translated: {vllm.untranslated.get(name, '')}[/]"
        table.add_row(name, str(value), flag)
    console.print(table)
    return 0


def check_settings(file: str, values: dict) -> None:
    """ValueError naming `file` for settings serve would refuse (max_num_seqs: 0, ...): the configs' own checks."""
    from model_optimizer.runtime.config import EngineConfig
    from model_optimizer.runtime.server.config import ServerConfig

    for cls in (EngineConfig, ServerConfig):
        names = {f.name for f in dataclasses.fields(cls)}
        try:
            cls(**{k: v for k, v in values.items() if k in names})
        except ValueError as exc:
            raise ValueError(f"{file}: {exc}") from None
