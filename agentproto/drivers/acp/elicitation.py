"""ACP's elicitation (``elicitation/create``, form mode) as protocol 1's ``Question`` request.

Pure functions: the driver (driver.py) keeps the pending elicitations and does the I/O.

Rules of this file:
- Only form mode is advertised (``clientCapabilities.elicitation.form``): URL mode asks the
  client to open a browser on the user's consent, which a sidecar cannot do; a request in
  another mode is ``-32602``, as ACP asks.
- A form is a flat object schema; each property becomes one question, in the schema's
  order: its ``title``/``description`` (or its name) is the question, the elicitation's
  ``message`` the first question's ``header``. An ``enum`` (or ``oneOf`` of ``const``s) of
  strings is a single choice, an ``array`` of one a multiple choice, a boolean a Yes/No
  choice, a string, number or integer free text. Anything else is ``-32602`` naming it.
- The app's answer becomes ``accept`` with ``content`` typed as the schema says (a number
  that does not parse is sent as the text typed: the agent validates again, as ACP asks of
  it); ``Cancel`` is ``cancel``. Never raises on what an agent sent.
"""

from __future__ import annotations

from typing import Any

#: Property types answered as free text, and how the text becomes the value.
_TEXT_TYPES = ("string", "number", "integer")


def _choices(prop: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The choices of an enum property (``enum`` or ``oneOf``/``anyOf`` of ``const``), or None."""
    if isinstance(prop.get("enum"), list):
        given = prop.get("enumNames")
        names: list[Any] = given if isinstance(given, list) else []
        out = []
        for i, value in enumerate(prop["enum"]):
            if not isinstance(value, str):
                return None
            label = names[i] if i < len(names) and isinstance(names[i], str) else value
            out.append({"id": value, "label": label})
        return out or None
    variants = prop.get("oneOf") if isinstance(prop.get("oneOf"), list) else prop.get("anyOf")
    if isinstance(variants, list):
        out = []
        for variant in variants:
            if not isinstance(variant, dict) or not isinstance(variant.get("const"), str):
                return None
            title = variant.get("title")
            out.append({"id": variant["const"], "label": title if isinstance(title, str) else variant["const"]})
        return out or None
    return None


def question_of(request_id: str, params: dict[str, Any]) -> dict[str, Any] | str:
    """The ``Question`` request of an ``elicitation/create``, or why it cannot be one."""
    mode = params.get("mode")
    if mode != "form":
        return f"elicitation mode {mode!r} is not supported (agentproto advertises form only)"
    schema = params.get("requestedSchema")
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict) or not props:
        return "requestedSchema: a form needs an object schema with properties"
    message = params.get("message") if isinstance(params.get("message"), str) else None
    questions: list[dict[str, Any]] = []
    for name, prop in props.items():
        if not isinstance(prop, dict):
            return f"requestedSchema.properties.{name}: not a schema"
        kind = prop.get("type")
        text = prop.get("title") or prop.get("description") or name
        question: dict[str, Any] = {
            "id": name,
            "text": text if isinstance(text, str) else name,
            "header": message if not questions else None,
            "choices": [],
            "multi_select": False,
            "allows_free_text": False,
        }
        items = prop.get("items")
        choices = _choices(items if kind == "array" and isinstance(items, dict) else prop)
        if choices is not None and kind in ("string", "array", None):
            question["choices"] = choices
            question["multi_select"] = kind == "array"
        elif kind == "boolean":
            question["choices"] = [{"id": "true", "label": "Yes"}, {"id": "false", "label": "No"}]
        elif kind in _TEXT_TYPES:
            question["allows_free_text"] = True
        else:
            return f"requestedSchema.properties.{name}: type {kind!r} is not one a form may ask"
        questions.append(question)
    return {"id": request_id, "questions": questions}


def _value(prop: dict[str, Any], entry: Any) -> Any:
    kind = prop.get("type")
    if "Choices" in entry:
        picked = list(entry["Choices"])
        if kind == "array":
            return picked
        if kind == "boolean":
            return picked[0] == "true"
        return picked[0]
    text = entry.get("Text", "")
    try:
        if kind == "integer":
            return int(text.strip())
        if kind == "number":
            return float(text.strip())
    except ValueError:
        pass
    return text


def response_of(params: dict[str, Any], answer: Any) -> dict[str, Any]:
    """The ``elicitation/create`` response of the app's (checked) answer to its Question."""
    if not isinstance(answer, dict) or "Question" not in answer:
        return {"action": "cancel"}
    props = params["requestedSchema"]["properties"]
    content = {name: _value(prop, entry) for (name, prop), entry in zip(props.items(), answer["Question"])}
    return {"action": "accept", "content": content}
