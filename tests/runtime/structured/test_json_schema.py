"""What the server tightens in a JSON schema before llguidance compiles it (structured/json_schema.py)."""

from __future__ import annotations

import datetime
import json
import re

import pytest
from pydantic import TypeAdapter, ValidationError

from model_optimizer.runtime.structured.json_schema import prepare


def test_date_and_time_formats_become_patterns_and_data_is_left_alone():
    schema = {
        "properties": {
            "at": {"type": "string", "format": "date-time"},
            "day": {"type": ["string", "null"], "format": "date"},
            "own": {"type": "string", "format": "time", "pattern": "^1"},  # the client's pattern stands
            "id": {"type": "string", "format": "uuid"},
            "fixed": {"const": {"format": "date"}, "default": {"format": "time"}},
            "default": {"type": "string", "format": "date"},  # a property named as a keyword is a schema
        },
        "$defs": {"const": {"format": "time"}},
    }
    before = json.dumps(schema)
    out = prepare(schema)
    assert json.dumps(schema) == before  # the input is not changed
    props = out["properties"]
    assert "format" not in props["at"] and props["at"]["pattern"].startswith("^")
    assert "format" not in props["day"]
    assert props["own"] == schema["properties"]["own"] and props["id"] == schema["properties"]["id"]
    assert props["fixed"] == schema["properties"]["fixed"]
    assert "pattern" in props["default"] and "pattern" in out["$defs"]["const"]


def test_properties_named_as_keywords_are_checked_as_schemas():
    with pytest.raises(ValueError, match="outside 64-bit"):
        prepare({"properties": {"default": {"type": "integer", "minimum": 10**19}}})
    prepare({"properties": {"const": {"type": "integer", "maximum": 2**53 + 1}}})  # a bound, not a const


# every value here is RFC 3339 (llguidance's formats took it), the refused ones Python's datetime refuses
@pytest.mark.parametrize(
    ("kind", "value", "python"),
    [
        ("date-time", "2023-01-01T23:59:60Z", datetime.datetime),  # a leap second
        ("time", "23:59:60.5+01:00", datetime.time),
        ("date", "0000-01-01", datetime.date),  # year 0
        ("date", "2023-02-29", datetime.date),  # not a leap year
        ("date", "1900-02-29", datetime.date),
    ],
)
def test_what_python_refuses_is_left_out(kind, value, python):
    with pytest.raises(ValidationError):
        TypeAdapter(python).validate_python(value)
    assert not re.fullmatch(prepare({"format": kind})["pattern"][1:-1], value)


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("date-time", "2024-02-29T00:00:00.123456789Z"),
        ("date-time", "9999-12-31T23:59:59-23:59"),
        ("date", "2000-02-29"),
        ("date", "0400-02-29"),
        ("date", "2023-04-30"),
        ("time", "00:00:00Z"),
    ],
)
def test_what_python_reads_is_kept(kind, value):
    python = {"date-time": datetime.datetime, "date": datetime.date, "time": datetime.time}[kind]
    TypeAdapter(python).validate_python(value)
    python.fromisoformat(value)
    assert re.fullmatch(prepare({"format": kind})["pattern"][1:-1], value)
    if kind != "date":  # RFC 3339's lowercase t and z, which fromisoformat refuses, are left out
        assert not re.fullmatch(prepare({"format": kind})["pattern"][1:-1], value.replace("T", "t").replace("Z", "z"))
