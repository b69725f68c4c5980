"""The search space: typed --set values, space files, and clear errors for unknown or impossible settings."""

from __future__ import annotations

import pytest

from model_optimizer.optimizer.tune.space import DEFAULT_KNOBS, Knob, SearchSpace, build_space, parse_fix


def test_fix_values_take_the_type_of_their_setting():
    assert parse_fix("max_num_seqs=256") == ("max_num_seqs", 256)
    assert parse_fix("enable-prefix-caching=false") == ("enable_prefix_caching", False)
    assert parse_fix("gpu_memory_utilization=0.85") == ("gpu_memory_utilization", 0.85)
    assert parse_fix("kv_cache_dtype=fp8") == ("kv_cache_dtype", "fp8")
    assert parse_fix("max_queued_requests=10") == ("max_queued_requests", 10)  # a ServerConfig field


@pytest.mark.parametrize(
    "text, message",
    [
        ("max_num_seqs", "NAME=VALUE"),
        ("max_num_seq=4", "unknown setting 'max_num_seq'"),
        ("max_num_seqs=many", "max_num_seqs must be a int"),
        ("kv_cache_dtype=int3", "kv_cache_dtype must be one of auto, fp8"),
        ("enforce_eager=maybe", "enforce_eager must be a bool"),
    ],
)
def test_bad_fix_is_a_clear_error(text, message):
    with pytest.raises(ValueError, match=message):
        parse_fix(text)


def test_fixed_settings_leave_the_search_and_are_checked_together():
    space = build_space(None, ["max_num_seqs=8", "block_size=32"])
    names = [k.name for k in space.knobs]
    assert "max_num_seqs" not in names and "block_size" not in names
    assert len(names) == len(DEFAULT_KNOBS) - 2
    with pytest.raises(ValueError, match="gpu_memory_utilization must be in"):
        build_space(None, ["gpu_memory_utilization=1.5"])


def test_space_file_lists_and_ranges(tmp_path):
    file = tmp_path / "space.yaml"
    file.write_text("max_num_seqs: [4, 8]\ngpu-memory-utilization: {low: 0.8, high: 0.95}\n")
    space = build_space(str(file), [])
    assert [(k.name, k.choices, k.low, k.high) for k in space.knobs] == [
        ("max_num_seqs", [4, 8], None, None),
        ("gpu_memory_utilization", None, 0.8, 0.95),
    ]


@pytest.mark.parametrize(
    "body, message",
    [
        ("max_num_seqs: [4, 0]\n", "value 0 is impossible: max_num_seqs must be a positive integer"),
        ("block_size: {low: 8, high: 4}\n", "low must be a number below high"),
        ("enforce_eager: {low: 0, high: 1}\n", "give a list of choices"),
        ("model: [a, b]\n", "'model' is not a searchable setting"),
        ("warp_speed: [1]\n", "'warp_speed' is not a searchable setting"),
        ("max_num_seqs: 4\n", "must be a list of values or a mapping"),
        ("gpu_memory_utilization: {low: 0.5, high: 1.5}\n", "range end 1.5 is impossible"),
    ],
)
def test_bad_space_file_is_a_clear_error(tmp_path, body, message):
    file = tmp_path / "space.yaml"
    file.write_text(body)
    with pytest.raises(ValueError, match=message):
        build_space(str(file), [])


def test_optional_choice_fields_take_their_empty_value_and_only_their_choices():
    space = SearchSpace([Knob("quantization", choices=[None, "fp8"]), Knob("num_kv_blocks", choices=[None, 64])])
    assert [k.choices for k in space.knobs] == [[None, "fp8"], [None, 64]]
    with pytest.raises(
        ValueError, match="quantization must be one of none, fp8, int8, int8-w8a8, awq, rtn-int4; got 'fp4'"
    ):
        SearchSpace([Knob("quantization", choices=["fp4"])])


def test_missing_space_file():
    with pytest.raises(FileNotFoundError, match="space file"):
        build_space("/nonexistent/space.yaml", [])


def test_round_trip_through_the_stored_form():
    space = SearchSpace([Knob("max_num_seqs", choices=[2, 4])], {"max_model_len": 512})
    again = SearchSpace.from_dict(space.to_dict())
    assert again.to_dict() == space.to_dict()
    assert again.settings({"max_num_seqs": 4}) == {"max_model_len": 512, "max_num_seqs": 4}


def test_a_study_on_the_cpu_searches_no_gpu_settings():
    from model_optimizer.optimizer.tune.device_space import fit_to_cpu, trials_on_cpu

    space = build_space()
    notes = fit_to_cpu(space)
    names = [k.name for k in space.knobs]
    assert not {"gpu_memory_utilization", "enforce_eager", "kv_cache_dtype"} & set(names)
    assert {"max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching"} <= set(names)
    assert any(n.startswith("kv_cache_dtype fp8 (") for n in notes) and any("CUDA graphs" in n for n in notes)
    assert trials_on_cpu(None, {"device": "cpu"}) and not trials_on_cpu("vllm serve {model}", {"device": "cpu"})


def test_the_cli_fits_the_space_to_the_device_found():
    import torch

    from model_optimizer.cli.main import build_parser
    from model_optimizer.cli.tune import _fresh

    stored = _fresh(build_parser().parse_args(["tune", "--set", "device=cpu"]))
    knobs = [k["name"] for k in stored["space"]["knobs"]]
    assert "gpu_memory_utilization" not in knobs and "enforce_eager" not in knobs and stored["space_notes"]
    external = _fresh(build_parser().parse_args(["tune", "--server-cmd", "srv {flags} --port {port}"]))
    assert "gpu_memory_utilization" in [k["name"] for k in external["space"]["knobs"]]  # its device is its own
    if not torch.cuda.is_available():  # no --set: the device found here
        assert "enforce_eager" not in [k["name"] for k in _fresh(build_parser().parse_args(["tune"]))["space"]["knobs"]]
