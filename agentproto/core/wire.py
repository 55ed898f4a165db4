"""The wire: command parsing (against the table in commands.py), line encoding and decoding
(the framing of bytes into lines is lines.py). Sans-IO.

Rules of this file:
- Nothing here touches a descriptor, a clock or a process. Bytes go in, values come out,
  and values go back out as bytes, so every rule can be tested byte by byte.
- A frame the app got wrong becomes a ``FrameError`` naming the frame's id (when it can
  be read), the command, the field and the expected type. The caller answers it with a
  ``BadFrame`` error and carries on.
- Errors that commands return are ``AgentError`` (errors.py): the reference schema's
  ``ErrorBody`` (``kind``, ``message`` and the variant's own fields).
"""

from __future__ import annotations

import json
import math
import re

# The command table (each command's fields and their checks) is commands.py; these names
# stay importable from here, where the framings have always taken them.
from agentproto.core.commands import COMMAND_NAMES as COMMAND_NAMES
from agentproto.core.commands import COMMANDS as COMMANDS
from agentproto.core.commands import is_uint

# The error family lives in errors.py; ERROR_KINDS, AgentError and error_from_body stay
# importable from here for the layers that have always taken them from the wire.
from agentproto.core.errors import ERROR_KINDS as ERROR_KINDS
from agentproto.core.errors import AgentError as AgentError
from agentproto.core.errors import AppError, Kind
from agentproto.core.errors import error_from_body as error_from_body

# The line framing is lines.py; these names stay importable from here too.
from agentproto.core.lines import DEFAULT_MAX_LINE as DEFAULT_MAX_LINE
from agentproto.core.lines import LineFramer as LineFramer
from agentproto.core.lines import TooLong as TooLong
from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, ClassVar, Iterable

    from agentproto.core.commands import Check as Check
    from agentproto.core.wire_types import FileDiff, RawTool, SystemTime, ToolInput, ToolKind, ToolUpdate


def _unencodable(obj: Any) -> Any:
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


# One encoder for every line. json.dumps (and JSONEncoder.encode) build a new C encoder
# per call, a measurable share of the relay's per-event cost; this one is built once.
# allow_nan is off: NaN and Infinity are not JSON, and a client's parser may reject them.
_c_encoder = getattr(json.encoder, "c_make_encoder", None)
if _c_encoder is not None:
    _iterencode = _c_encoder(
        None, _unencodable, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, False
    )

    def _encode_json(obj: Any) -> str:
        return "".join(_iterencode(obj, 0))

else:  # pragma: no cover - CPython always has the C encoder
    _encode_json = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode  # type: ignore[assignment]


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def encode(obj: Any) -> bytes:
    """One output line: ASCII-only, so any string (lone surrogates included) is safe, and
    strict JSON (a non-finite number an agent sent becomes null)."""
    try:
        text = _encode_json(obj)
    except ValueError:
        text = _encode_json(_finite(obj))
    return (text + "\n").encode("ascii")


#: An event line as ``encode({"event": event})`` writes it, with the event's members in the
#: order the engine builds them (EngineSession._send).
_EVENT_LINE = (
    '{"event":{"sequence":%d,"occurred_at":{"secs_since_epoch":%d,"nanos_since_epoch":%d},'
    '"session_id":%s,"turn_info":%s,"kind":%s,"extensions":%s}}\n'
)
_EVENT_KEYS = ("sequence", "occurred_at", "session_id", "turn_info", "kind", "extensions")
_TIME_KEYS = ("secs_since_epoch", "nanos_since_epoch")
_TURN_KEYS = ("id", "parent_tool_id")
_DELTA_KEYS = ("message_id", "text")
_quote = json.encoder.encode_basestring_ascii


def encode_event(event: dict[str, Any]) -> bytes:
    """``encode({"event": event})``, byte for byte. It is a relay's every line, so for an
    event of the shape the engine builds (its members in that order, its counters ints, a
    string session id) only the kind (and the extensions, when there are any) goes through
    the JSON encoder: the envelope is formatted into one template, and the line is copied
    once on its way to bytes (not joined, then suffixed, then encoded). Anything else (a
    non-finite number in the kind, an event of another shape) takes ``encode`` itself."""
    try:
        if tuple(event) == _EVENT_KEYS:
            sequence = event["sequence"]
            at = event["occurred_at"]
            session_id = event["session_id"]
            turn = event["turn_info"]
            extensions = event["extensions"]
            # ``%d`` would write a bool as 1 and a float cut short: only exact ints go in.
            if type(sequence) is int and type(at) is dict and tuple(at) == _TIME_KEYS and type(session_id) is str:
                secs, nanos = at["secs_since_epoch"], at["nanos_since_epoch"]
                if type(secs) is int and type(nanos) is int:
                    if turn is None:
                        turn_json = "null"
                    elif type(turn) is dict and tuple(turn) == _TURN_KEYS and turn["parent_tool_id"] is None:
                        turn_json = '{"id":' + _quote(turn["id"]) + ',"parent_tool_id":null}'
                    else:
                        turn_json = _encode_json(turn)
                    kind = event["kind"]
                    # A streamed text chunk, the relay's commonest kind, by hand as well.
                    delta = kind.get("TextDelta") if type(kind) is dict and len(kind) == 1 else None
                    if type(delta) is dict and tuple(delta) == _DELTA_KEYS:
                        kind_json = '{"TextDelta":{"message_id":' + _quote(delta["message_id"]) + ',"text":'
                        kind_json += _quote(delta["text"]) + "}}"
                    else:
                        kind_json = _encode_json(kind)
                    return (
                        _EVENT_LINE
                        % (
                            sequence,
                            secs,
                            nanos,
                            _quote(session_id),
                            turn_json,
                            kind_json,
                            "{}" if type(extensions) is dict and not extensions else _encode_json(extensions),
                        )
                    ).encode("ascii")
    except (TypeError, ValueError):
        pass  # not a string where one goes, a non-finite number: encode's own way
    return encode({"event": event})


# -- commands ---------------------------------------------------------------------------


class FrameError(AppError):
    """A line that is not a valid command; answered with ``BadFrame`` (the app's fault)."""

    def __init__(self, frame_id: int | None, message: str, **fields: Any) -> None:
        super().__init__(Kind.BAD_FRAME, message, detail=message, **fields)
        self.frame_id = frame_id


class Command:
    """One parsed command line. (Not a dataclass: start-up time, see cli.py.)"""

    __slots__ = ("id", "name", "args")

    def __init__(self, id: int, name: str, args: dict[str, Any] | None = None) -> None:
        self.id = id
        self.name = name
        self.args = {} if args is None else args

    def __repr__(self) -> str:
        return f"Command({self.id!r}, {self.name!r}, {self.args!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Command) and (self.id, self.name, self.args) == (other.id, other.name, other.args)

    __hash__ = None  # type: ignore[assignment]  # mutable, as a dataclass's

    def get(self, key: str, default: Any = None) -> Any:
        value = self.args.get(key)
        return default if value is None else value


#: Errors name types as JSON does ("got number"), for the app reads JSON, not Python.
def json_type_name(value: Any) -> str:
    """The JSON name of a value's type (``true`` is a boolean, not a number)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


#: Compiled on first use (``re`` caches it), never by a start.
_ID_PATTERN = rb'"id"\s*:\s*(\d{1,19})\b'


def salvage_id(raw: bytes) -> int | None:
    """Best-effort id of a frame that did not parse (a truncated or over-long line)."""
    match = re.search(_ID_PATTERN, raw)
    return int(match.group(1)) if match else None


_scan_once = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_JSON_SPACE = " \t\n\r"


def decode_json_line(line: bytes) -> Any:
    """Decode one line as exactly one UTF-8 JSON value; ValueError with a readable message.

    The one JSON line decoder of every framing and every driver. The fast path calls the
    C scanner on the decoded text (``json.loads`` sniffs the encoding and runs a regex
    around the value: a third of a relayed chunk's cost); anything it does not take
    goes through ``json.loads`` for the precise error.
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"invalid UTF-8 at byte {exc.start}") from None
    try:
        value, end = _scan_once(text, 0)
    except (StopIteration, ValueError, RecursionError):
        pass  # leading whitespace, or not JSON: the slow path says which
    else:
        if end == len(text) or not text[end:].strip(_JSON_SPACE):
            return value
    return load_json(text)


def load_json(text: str, lines: bool = False) -> Any:
    """``json.loads`` whose every failure is a ValueError saying what and where: "(at column
    C)", or "(line L, column C)" for a document of several ``lines`` (a mock script)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}" if lines else f"at column {exc.colno}"
        raise ValueError(f"not JSON: {exc.msg} ({where})") from None
    except RecursionError:
        raise ValueError("not JSON: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer past the interpreter's digit limit
        raise ValueError(f"not JSON: {exc}") from None


def parse_command(line: bytes | TooLong, max_line: int = DEFAULT_MAX_LINE) -> Command:
    """Parse one input line into a ``Command`` or raise ``FrameError``."""
    if isinstance(line, TooLong):
        raise FrameError(
            salvage_id(line.head),
            f"line too long: more than {max_line} bytes; discarded",
        )
    try:
        obj = decode_json_line(line)
    except ValueError as exc:
        raise FrameError(salvage_id(line) if len(line) < 65536 else None, str(exc)) from None
    return command_from_object(obj)


class FieldError(ValueError):
    """A field its check refused; ``expected`` is None when the field is missing."""

    def __init__(self, key: str, expected: str | None, got: str) -> None:
        super().__init__(key)
        self.key = key
        self.expected = expected
        self.got = got


def check_fields(
    obj: dict[str, Any],
    required: dict[str, Check],
    optional: dict[str, Check],
    *,
    defaults: dict[str, Any] | None = None,
    null_is_missing: bool = False,
) -> dict[str, Any]:
    """The fields of ``obj`` that the checks name, each checked, or ``FieldError`` for the
    first one wrong. Every framing validates its requests with this one loop (protocol 1
    commands here; the ops framing, whose null means "not given" and whose ``session``
    may default, with ``null_is_missing`` and ``defaults``); each words its own errors."""
    args: dict[str, Any] = {}
    for key, check in required.items():
        value = obj.get(key)
        if value is None and (null_is_missing or key not in obj):
            value = defaults.get(key) if defaults else None
            if value is None:
                raise FieldError(key, None, "nothing")
        args[key] = _checked(key, check, value)
    for key, check in optional.items():
        if key in obj:
            args[key] = _checked(key, check, obj[key])
    return args


def _checked(key: str, check: Check, value: Any) -> Any:
    problem = check(value)
    if problem is not None:
        raise FieldError(key, problem, _got(check, value))
    return value


def _got(check: Check, value: Any) -> str:
    """What was received: its JSON type, and for a name one of a fixed set (an enum) the
    name itself, so "got string \"Yolo\"" says which one. Other values are never quoted
    back: a mistyped ``env`` or header may hold a secret."""
    got = json_type_name(value)
    if getattr(check, "shows_value", False) and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        shown = json.dumps(value)
        got += " " + (shown if len(shown) <= 66 else shown[:60] + '..."')
    return got


def command_from_object(obj: Any) -> Command:
    if not isinstance(obj, dict):
        raise FrameError(None, f"a frame must be a JSON object, got {json_type_name(obj)}")
    raw_id = obj.get("id")
    if not is_uint(raw_id):
        if "id" not in obj:
            raise FrameError(None, "missing field `id` (a non-negative integer)")
        raise FrameError(None, f"field `id` must be a non-negative integer below 2^64, got {json_type_name(raw_id)}")
    frame_id: int = raw_id
    name = obj.get("cmd")
    if name is None:
        raise FrameError(frame_id, "missing field `cmd`; valid commands: " + ", ".join(COMMAND_NAMES))
    if not isinstance(name, str):
        raise FrameError(
            frame_id,
            f"field `cmd` must be a string (a command name), got {json_type_name(name)}; valid commands: "
            + ", ".join(COMMAND_NAMES),
        )
    if name not in COMMANDS:
        raise FrameError(frame_id, f"unknown command `{name}`; valid commands: " + ", ".join(COMMAND_NAMES))
    required, optional = COMMANDS[name]
    try:
        args = check_fields(obj, required, optional)
    except FieldError as error:
        if error.expected is None:
            raise FrameError(frame_id, f"{name}: missing field `{error.key}`") from None
        raise FrameError(frame_id, f"{name}: field `{error.key}` must be {error.expected}, got {error.got}") from None
    return Command(frame_id, name, args)


# -- values shared by the layers above --------------------------------------------------

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_: Any) -> Any:
        return lambda cls: cls


@dataclass_transform()
class Record:
    """Plain data built by position or keyword, as a dataclass is, without importing
    ``dataclasses`` (and ``inspect`` with it) at start-up: together with creating the
    classes, that was several milliseconds of a cold start for four small records.

    The fields are the class's own annotations, in order (records do not inherit from one
    another); a class-level value is the field's default, and a list or dict default is
    copied for each instance (never shared).
    """

    _fields: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls) -> None:
        annotations = cls.__dict__.get("__annotations__", {})
        cls._fields = tuple(k for k, v in annotations.items() if not str(v).startswith("ClassVar"))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = type(self)
        if len(args) > len(cls._fields):
            raise TypeError(f"{cls.__name__}: too many arguments")
        for name, value in zip(cls._fields, args):
            setattr(self, name, value)
        for name in cls._fields[len(args) :]:
            if name in kwargs:
                value = kwargs.pop(name)
            elif name in cls.__dict__:
                value = cls.__dict__[name]
                if isinstance(value, (list, dict)):
                    value = value.copy()
            else:
                raise TypeError(f"{cls.__name__}: missing {name}")
            setattr(self, name, value)
        if kwargs:
            raise TypeError(f"{cls.__name__}: no field {', '.join(kwargs)}")

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in type(self)._fields)
        return f"{type(self).__name__}({shown})"


def event_kind_name(kind: Any) -> str:
    """The variant name of an EventKind: a bare string, or the single key of an object."""
    if isinstance(kind, str):
        return kind
    if isinstance(kind, dict) and len(kind) == 1:
        name: str = next(iter(kind))
        return name
    return ""


def system_time(ns: int) -> SystemTime:
    return {"secs_since_epoch": ns // 1_000_000_000, "nanos_since_epoch": ns % 1_000_000_000}


def tool_update(
    tool_id: str,
    kind: ToolKind = "Other",
    title: str = "",
    status: str = "Pending",
    input: ToolInput = "None",
    output: str | None = None,
    diffs: Iterable[FileDiff] = (),
    locations: Iterable[str] = (),
    raw: RawTool | None = None,
) -> ToolUpdate:
    """A ``ToolUpdate`` with every required member, for drivers to fill."""
    return {
        "id": tool_id,
        "kind": kind,
        "title": title,
        "status": status,
        "input": input,
        "output": output,
        "diffs": list(diffs),
        "locations": list(locations),
        "raw": raw,
    }
