"""The wire: framing, command validation, error bodies and line encoding. Sans-IO.

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
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, TypeGuard

# The error family lives in errors.py; ERROR_KINDS, AgentError and error_from_body stay
# importable from here for the layers that have always taken them from the wire.
from agentproto.errors import ERROR_KINDS as ERROR_KINDS
from agentproto.errors import AgentError as AgentError
from agentproto.errors import AppError, Kind
from agentproto.errors import error_from_body as error_from_body

# -- framing ----------------------------------------------------------------------------

DEFAULT_MAX_LINE = 8 * 1024 * 1024


class TooLong:
    """Marker yielded in place of a line that exceeded the framer's bound."""

    __slots__ = ("size", "head")

    def __init__(self, size: int, head: bytes) -> None:
        self.size = size  # bytes seen (at least), discarded
        self.head = head  # the first bytes, to recover an id from

    def __repr__(self) -> str:
        return f"TooLong({self.size})"


class LineFramer:
    """Splits a byte stream into lines with bounded memory.

    ``feed(data)`` returns the complete lines (without the newline; a trailing ``\\r`` is
    kept, since JSON ignores it) and ``TooLong`` markers for lines longer than
    ``max_line``: their bytes are discarded as they arrive, never buffered.
    ``close()`` returns the final unterminated line, if any.
    """

    def __init__(self, max_line: int = DEFAULT_MAX_LINE) -> None:
        self.max_line = max_line
        self._buf = bytearray()
        self._discarding = 0  # bytes discarded so far of an over-long line
        self._head = b""

    def feed(self, data: bytes) -> list[bytes | TooLong]:
        out: list[bytes | TooLong] = []
        start = 0
        if self._discarding:
            nl = data.find(b"\n")
            if nl < 0:
                self._discarding += len(data)
                return out
            out.append(TooLong(self._discarding + nl, self._head))
            self._discarding = 0
            self._head = b""
            start = nl + 1
        buf = self._buf
        if buf:
            nl = data.find(b"\n", start)
            if nl < 0:
                buf += data[start:] if start else data
                self._check_overflow(out)
                return out
            buf += data[start:nl]
            if len(buf) > self.max_line:
                out.append(TooLong(len(buf), bytes(buf[:256])))
            else:
                out.append(bytes(buf))
            buf.clear()
            start = nl + 1
        end = len(data)
        while start < end:
            nl = data.find(b"\n", start)
            if nl < 0:
                buf += data[start:]
                self._check_overflow(out)
                break
            if nl - start > self.max_line:
                out.append(TooLong(nl - start, data[start : min(nl, start + 256)]))
            else:
                out.append(data[start:nl])
            start = nl + 1
        return out

    def _check_overflow(self, out: list[bytes | TooLong]) -> None:
        if len(self._buf) > self.max_line:
            self._discarding = len(self._buf)
            self._head = bytes(self._buf[:256])
            self._buf.clear()

    def close(self) -> list[bytes | TooLong]:
        if self._discarding:
            marker = TooLong(self._discarding, self._head)
            self._discarding = 0
            return [marker]
        if self._buf:
            line = bytes(self._buf)
            self._buf.clear()
            return [line]
        return []

    @property
    def buffered(self) -> int:
        return len(self._buf)


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


# -- commands ---------------------------------------------------------------------------


class FrameError(AppError):
    """A line that is not a valid command; answered with ``BadFrame`` (the app's fault)."""

    def __init__(self, frame_id: int | None, message: str, **fields: Any) -> None:
        super().__init__(Kind.BAD_FRAME, message, detail=message, **fields)
        self.frame_id = frame_id


class Command:
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


Check = Callable[[Any], "str | None"]


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


_type_name = json_type_name


def _is_uint(value: Any) -> TypeGuard[int]:
    """A u64, as the reference schema types ids and counts."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**64


def _string(value: Any) -> str | None:
    return None if isinstance(value, str) else "a string"


def _opt_string(value: Any) -> str | None:
    return None if value is None or isinstance(value, str) else "a string or null"


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else "a boolean"


def _uint_min1(value: Any) -> str | None:
    return None if _is_uint(value) and value >= 1 else "an integer >= 1"


def _strings(value: Any) -> str | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return None
    return "an array of strings"


def _string_map(value: Any) -> str | None:
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        return None
    return "an object of strings"


def _config_value(value: Any) -> str | None:
    return None if isinstance(value, (str, bool)) else "a string or a boolean"


def _configure_map(value: Any) -> str | None:
    if isinstance(value, dict) and all(isinstance(v, (str, bool)) for v in value.values()):
        return None
    return "an object of strings or booleans"


def _enum(*names: str) -> Check:
    expected = "one of " + ", ".join(f'"{n}"' for n in names)

    def check(value: Any) -> str | None:
        return None if value in names else expected

    return check


def _opt(check: Check) -> Check:
    def optional(value: Any) -> str | None:
        if value is None:
            return None
        problem = check(value)
        return None if problem is None else problem + " or null"

    return optional


def _agent_ref(value: Any) -> str | None:
    expected = 'a catalog id string, {"id": ID, "path": PATH} or {"acp": {"name", "path", "args"}}'
    if isinstance(value, str):
        return None if value else expected
    if not isinstance(value, dict):
        return expected
    if "acp" in value:
        spec = value["acp"]
        if (
            isinstance(spec, dict)
            and isinstance(spec.get("name"), str)
            and isinstance(spec.get("path"), str)
            and _strings(spec.get("args", [])) is None
        ):
            return None
        return expected
    if isinstance(value.get("id"), str) and isinstance(value.get("path"), str):
        return None
    return expected


def _mcp_servers(value: Any) -> str | None:
    expected = 'an array of {"name", "connection": {"Stdio"|"Http"|"Sse": {…}}}'
    if not isinstance(value, list):
        return expected
    for server in value:
        if not isinstance(server, dict) or not isinstance(server.get("name"), str):
            return expected
        conn = server.get("connection")
        if not isinstance(conn, dict) or len(conn) != 1:
            return expected
        (tag, body), = conn.items()
        if not isinstance(body, dict):
            return expected
        if tag == "Stdio":
            if not isinstance(body.get("command"), str) or _strings(body.get("args", [])):
                return expected
            if _string_map(body.get("env", {})):
                return expected
        elif tag in ("Http", "Sse"):
            if not isinstance(body.get("url"), str) or _string_map(body.get("headers", {})):
                return expected
        else:
            return expected
    return None


PERMISSION_CHOICES = ("AllowOnce", "AllowAlways", "DenyOnce", "DenyAlways")


def _answer(value: Any) -> str | None:
    expected = (
        '{"Permission": "AllowOnce"|"AllowAlways"|"DenyOnce"|"DenyAlways"}, '
        '{"Question": [{"Choices": [..]}|{"Text": ".."}]}, {"Deny": {"message": ".."}}, '
        '{"ToolResult": {"content", "is_error", "structured"?}}, {"HookResult": {..}} or "Cancel"'
    )
    if value == "Cancel":
        return None
    if not isinstance(value, dict) or len(value) != 1:
        return expected
    (tag, body), = value.items()
    if tag in ("ToolResult", "HookResult"):
        # The shape inside is the request's to judge (apptools.py): a result that does not fit
        # its tool is InvalidRequest and the request stays open, never a BadFrame.
        return None if isinstance(body, dict) else expected
    if tag == "Permission":
        return None if body in PERMISSION_CHOICES else expected
    if tag == "Deny":
        if isinstance(body, dict) and isinstance(body.get("message"), str):
            return None
        return expected
    if tag == "Question":
        if not isinstance(body, list):
            return expected
        for entry in body:
            if not isinstance(entry, dict) or len(entry) != 1:
                return expected
            (etag, ebody), = entry.items()
            if etag == "Choices" and _strings(ebody) is None:
                continue
            if etag == "Text" and isinstance(ebody, str):
                continue
            return expected
        return None
    return expected


def _json_schema(value: Any) -> str | None:
    return None if isinstance(value, (dict, bool)) else "a JSON Schema (an object or a boolean)"


def _positive_seconds(value: Any) -> str | None:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return None if number and 0 < value <= 2**31 else "a number of seconds > 0"


_PERMISSION_MODE = _enum("Ask", "AcceptEdits", "AutoApprove")

#: The launch options that ``open``, ``generate``, ``probe`` and ``plan_usage`` share.
SESSION_OPTIONS: dict[str, Check] = {
    "resume": _opt_string,
    "fork": _opt_string,
    "fork_at": _opt_string,
    "permission_mode": _opt(_PERMISSION_MODE),
    "mcp_servers": _opt(_mcp_servers),
    "configure": _opt(_configure_map),
    "instructions": _opt_string,
    "notes": _opt_string,
    "reminder": _opt_string,
    "output_schema": _opt(_json_schema),
    "env": _opt(_string_map),
    "args": _opt(_strings),
    "config_home": _opt_string,
    "record_wire": _opt_string,
}

#: The app's own tools and hooks (``open`` and ``generate``). Only the types are checked
#: here: each declaration is checked at open (apptools.py), InvalidConfiguration naming it.
TOOL_OPTIONS: dict[str, Check] = {
    "tools": _opt(lambda v: None if isinstance(v, list) else "an array of tools"),
    "tool_timeout": _opt(_positive_seconds),
    "hooks": _opt(lambda v: None if isinstance(v, list) else "an array of hook event names"),
    "hook_timeout": _opt(_positive_seconds),
}

# name -> (required fields, optional fields)
COMMANDS: dict[str, tuple[dict[str, Check], dict[str, Check]]] = {
    "discover": ({}, {}),
    "probe": ({"agent": _agent_ref}, {"dir": _opt_string, **SESSION_OPTIONS}),
    "plan_usage": ({"agent": _agent_ref}, {"dir": _opt_string, **SESSION_OPTIONS}),
    "open": ({"agent": _agent_ref, "dir": _string}, {**SESSION_OPTIONS, **TOOL_OPTIONS}),
    "generate": (
        {"agent": _agent_ref, "dir": _string, "prompt": _string},
        {"attachments": _opt(_strings), **SESSION_OPTIONS, **TOOL_OPTIONS},
    ),
    "prompt": ({"session": _string, "text": _string}, {"attachments": _opt(_strings)}),
    "answer": ({"session": _string, "request": _string, "answer": _answer}, {}),
    "configure": ({"session": _string, "option": _string, "value": _config_value}, {}),
    "cancel": ({"session": _string}, {"clear_queue": _opt(_boolean), "turn": _opt_string}),
    "rollback": (
        {"session": _string, "turns": _uint_min1, "scope": _enum("Conversation", "ConversationAndFiles")},
        {},
    ),
    "dequeue": ({"session": _string, "prompt": _string}, {}),
    "compact": ({"session": _string}, {}),
    "close": ({"session": _string}, {}),
    "info": ({"session": _string}, {}),
}

COMMAND_NAMES = tuple(COMMANDS)

_ID_RE = re.compile(rb'"id"\s*:\s*(\d{1,19})\b')


def salvage_id(raw: bytes) -> int | None:
    """Best-effort id of a frame that did not parse (a truncated or over-long line)."""
    match = _ID_RE.search(raw)
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
        raise FieldError(key, problem, _type_name(value))
    return value


def command_from_object(obj: Any) -> Command:
    if not isinstance(obj, dict):
        raise FrameError(None, f"a frame must be a JSON object, got {_type_name(obj)}")
    raw_id = obj.get("id")
    if not _is_uint(raw_id):
        if "id" not in obj:
            raise FrameError(None, "missing field `id` (a non-negative integer)")
        raise FrameError(None, f"field `id` must be a non-negative integer below 2^64, got {_type_name(raw_id)}")
    frame_id: int = raw_id
    name = obj.get("cmd")
    if name is None:
        raise FrameError(frame_id, "missing field `cmd`; valid commands: " + ", ".join(COMMAND_NAMES))
    if not isinstance(name, str) or name not in COMMANDS:
        shown = name if isinstance(name, str) else _type_name(name)
        raise FrameError(
            frame_id, f"unknown command `{shown}`; valid commands: " + ", ".join(COMMAND_NAMES)
        )
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


def system_time(ns: int) -> dict[str, int]:
    return {"secs_since_epoch": ns // 1_000_000_000, "nanos_since_epoch": ns % 1_000_000_000}


def tool_update(
    tool_id: str,
    kind: Any = "Other",
    title: str = "",
    status: str = "Pending",
    input: Any = "None",
    output: str | None = None,
    diffs: Iterable[dict[str, Any]] = (),
    locations: Iterable[str] = (),
    raw: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
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
        **extra,
    }
