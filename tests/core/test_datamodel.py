"""The contract from Python's code generators: datamodel-code-generator (pinned) turns
agentproto/schema.json into pydantic models; the module imports, and validates — and dumps
back unchanged — real lines: the recorded set in fixtures/lines/ (scripts/record_lines.py)
and a set recorded afresh from this checkout's sidecar."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pydantic
import pytest
from ops_support import OPS_LINE, OPS_REQUEST
from sidecar import ROOT, _validator, check_line

FIXTURES = ROOT / "fixtures" / "lines"
#: Which model each recorded file holds.
MODELS = {"frames": "Frame", "lines": "Line", "ops-requests": "OpsRequest", "ops-lines": "OpsLine"}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    out = tmp_path_factory.mktemp("models") / "agentproto_models.py"
    done = subprocess.run(
        [
            sys.executable, "-m", "datamodel_code_generator",
            "--input", str(ROOT / "agentproto" / "schema.json"),
            "--input-file-type", "jsonschema",
            "--output-model-type", "pydantic_v2.BaseModel",
            "--output", str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    spec = importlib.util.spec_from_file_location("agentproto_models", out)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["agentproto_models"] = module  # pydantic resolves forward references through it
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lines")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "record_lines.py"), "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return out


def read(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def check_roundtrip(model: Any, objects: list[Any]) -> None:
    for obj in objects:
        value = model.model_validate(obj)
        assert value.model_dump(mode="json", by_alias=True, exclude_unset=True) == obj


@pytest.mark.parametrize("name", list(MODELS))
def test_generated_models_validate_the_recorded_lines(models, name):
    objects = read(FIXTURES / f"{name}.jsonl")
    assert len(objects) >= 10
    check_roundtrip(getattr(models, MODELS[name]), objects)


@pytest.mark.parametrize("name", list(MODELS))
def test_generated_models_validate_lines_recorded_now(models, fresh, name):
    check_roundtrip(getattr(models, MODELS[name]), read(fresh / f"{name}.jsonl"))


def test_the_recorded_lines_are_real_and_cover_the_contract():
    """The fixtures are lines of this schema (and protocol 1 lines of the reference too),
    and hold every kind of line."""
    frame = _validator(json.loads((ROOT / "agentproto" / "schema.json").read_text()), "Frame")
    for obj in read(FIXTURES / "frames.jsonl"):
        assert frame.is_valid(obj), obj
    lines = read(FIXTURES / "lines.jsonl")
    reference = json.loads((ROOT / "fixtures" / "anyagent-schema.json").read_text())
    known = {next(iter(v["properties"])) for v in reference["definitions"]["EventKind"]["oneOf"] if "properties" in v}
    for obj in lines:
        kind = obj["event"]["kind"] if "event" in obj else None
        # Lines of the kinds agentproto added are checked against its own schema only.
        check_line(obj, reference=not isinstance(kind, dict) or next(iter(kind)) in known)
    shapes = {tuple(sorted(obj)) for obj in lines}
    assert shapes == {("hello",), ("id", "ok"), ("error", "id"), ("event",), ("error", "session"), ("closed",)}
    events = {k if isinstance(k, str) else next(iter(k)) for k in (o["event"]["kind"] for o in lines if "event" in o)}
    assert {"TurnStarted", "TextDelta", "RequestOpened", "ToolUpdated", "TurnEnded", "StatusChanged"} <= events
    for obj in read(FIXTURES / "ops-requests.jsonl"):
        assert OPS_REQUEST.is_valid(obj), obj
    ops = read(FIXTURES / "ops-lines.jsonl")
    for obj in ops:
        assert OPS_LINE.is_valid(obj), obj
    assert {o["kind"] for o in ops} == {"event", "log", "result", "error", "done"}
    assert {o["ok"] for o in ops if o["kind"] == "result"} == {True, False}


def test_generated_models_refuse_what_the_schema_refuses(models):
    for bad in (
        {"closed": "s1", "extra": 1},  # an envelope holds exactly its keys
        {"session": "s1", "error": {"message": "no kind"}},
        {"event": {"sequence": -1, "session_id": "s1", "turn_info": None, "kind": "TurnStarted"}},
        {"id": 1},
    ):
        with pytest.raises(pydantic.ValidationError):
            models.Line.model_validate(bad)
    with pytest.raises(pydantic.ValidationError):
        models.Frame.model_validate({"id": 1, "cmd": "prompt", "text": "no session"})
