from __future__ import annotations

import io
import json
import logging

import pytest
from pydantic import ValidationError

from tollgate.runtime.logging import setup_logging
from tollgate.runtime.settings import ServiceSettings


def test_json_lines_carry_extra_fields() -> None:
    stream = io.StringIO()
    setup_logging("unit", "DEBUG", "json", stream)
    try:
        logging.getLogger("tollgate.test").info("allocated %d", 7, extra={"tunnel_id": 7, "lb": "a"})
        entry = json.loads(stream.getvalue().splitlines()[-1])
    finally:
        setup_logging("unit", "WARNING", "text")
    assert entry["message"] == "allocated 7"
    assert (entry["service"], entry["level"], entry["tunnel_id"], entry["lb"]) == ("unit", "info", 7, "a")


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOLLGATE_HEALTH_PORT", "9123")
    monkeypatch.setenv("TOLLGATE_NAMESPACE", "epic")
    settings = ServiceSettings()
    assert (settings.health_port, settings.namespace) == (9123, "epic")


def test_bad_setting_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOLLGATE_LOG_LEVEL", "LOUD")
    with pytest.raises(ValidationError, match="log_level"):
        ServiceSettings()
