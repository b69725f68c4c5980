"""ServerConfig refuses an empty host (uvicorn listened on every interface) and names the field whose
JSON list does not parse."""

from __future__ import annotations

import pytest

from model_optimizer.runtime.server.config import ServerConfig


@pytest.mark.parametrize("host", ["", "  "])
def test_an_empty_host_is_refused_not_every_interface(host):
    with pytest.raises(ValueError, match=r"^host must be an address such as 127.0.0.1 \(0.0.0.0: every interface\)"):
        ServerConfig(host=host)


@pytest.mark.parametrize("field", ["allowed_origins", "allowed_headers", "allowed_methods"])
def test_a_json_list_that_does_not_parse_names_its_field(field):
    with pytest.raises(ValueError, match=rf"^{field} starts with '\[' but is not a JSON list"):
        ServerConfig(**{field: "[bad"})


def test_a_tuple_is_a_list_here():
    assert ServerConfig(allowed_methods=("GET", "post")).allowed_methods == ["GET", "POST"]


def test_an_empty_served_model_name_is_refused_not_the_folder_name():
    """`--served-model-name=` served the folder's name: clients sending "" would get a 404."""
    with pytest.raises(ValueError, match="^served_model_name is empty"):
        ServerConfig(served_model_name=" ")
