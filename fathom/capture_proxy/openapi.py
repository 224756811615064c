"""The proxy's OpenAPI document, served at GET /openapi.json.

The proxy's routes are plain Starlette routes (no FastAPI request models on the hot path), so FastAPI
cannot derive this; the session types come from protocol's pydantic models, the model-call bodies are
described as far as the proxy itself checks them (the rest passes to vLLM). Schemathesis fuzzes it in CI.
"""

from __future__ import annotations

from typing import Any

from fathom.protocol import SessionCreate, SessionInfo

_REF = "#/components/schemas/{model}"


def _json(schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"$ref": _REF.format(model="Error")}}}}


def _ok(description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"description": description}
    if schema is not None:
        out["content"] = {"application/json": {"schema": schema}}
    return out


_MESSAGE = {"type": "object", "required": ["role", "content"],
            "properties": {"role": {"type": "string", "enum": ["system", "user", "assistant"]},
                           "content": {"type": "string"}}}
_CALL_COMMON = {"model": {"type": "string", "enum": ["policy"]},
                "max_tokens": {"type": "integer", "minimum": 1, "maximum": 64},
                "temperature": {"type": "number", "minimum": 0, "maximum": 2},
                "stream": {"type": "boolean"}}
_SESSION_PARAM = [{"name": "sid", "in": "path", "required": True, "schema": {"type": "string"}}]
_KEY = [{"sessionKey": []}, {"apiKey": []}]


def openapi_schema() -> dict[str, Any]:
    components: dict[str, Any] = {}
    for model in (SessionCreate, SessionInfo):
        schema = model.model_json_schema(ref_template=_REF, mode="validation")
        components.update(schema.pop("$defs", {}))
        components[model.__name__] = schema
    components["Error"] = {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["message", "type", "code"],
        "properties": {"message": {"type": "string"}, "type": {"type": "string"}, "code": {"type": "string"}}}}}
    info = {"$ref": _REF.format(model="SessionInfo")}
    unknown = _error("unknown or evicted session id")
    call_errors = {"400": _error("invalid body or headers"), "401": _error("missing, unknown or closed session key"),
                   "409": _error("the call breaks the session's conversation"), "413": _error("body over the cap"),
                   "429": _error("a session budget is spent"), "502": _error("the policy server failed the call"),
                   "503": _error("the policy server is unreachable")}
    paths: dict[str, Any] = {
        "/sessions": {"post": {"summary": "Open a capture session pinned to the newest policy version",
                               "requestBody": _json({"$ref": _REF.format(model="SessionCreate")}, required=False),
                               "responses": {"201": _ok("the session", info), "400": _error("not JSON"),
                                             "404": _error("unknown model"), "413": _error("body over the cap"),
                                             "422": _error("invalid session spec"),
                                             "503": _error("the policy server is unreachable")}}},
        "/sessions/{sid}": {
            "get": {"parameters": _SESSION_PARAM, "responses": {"200": _ok("the session", info), "404": unknown}},
            "delete": {"parameters": _SESSION_PARAM, "responses": {"200": _ok("the closed session", info),
                                                                   "404": unknown}}},
        "/sessions/{sid}/trace": {"get": {"parameters": _SESSION_PARAM, "responses": {
            "200": _ok("OpenEnv TrainingTrace", {"type": "object"}), "404": unknown,
            "409": _error("not trainable, or the capture is broken")}}},
        "/sessions/{sid}/calls": {"get": {"parameters": _SESSION_PARAM, "responses": {
            "200": _ok("every call record", {"type": "object"}), "404": unknown}}},
        "/v1/chat/completions": {"post": {"security": _KEY, "requestBody": _json({
            "type": "object", "required": ["model", "messages"],
            "properties": {**_CALL_COMMON, "messages": {"type": "array", "minItems": 1, "maxItems": 4,
                                                        "items": _MESSAGE}}}),
            "responses": {"200": _ok("the captured completion", {"type": "object"}), **call_errors}}},
        "/v1/completions": {"post": {"security": _KEY, "requestBody": _json({
            "type": "object", "required": ["model", "prompt"],
            "properties": {**_CALL_COMMON, "prompt": {"anyOf": [
                {"type": "string"}, {"type": "array", "minItems": 1, "maxItems": 32,
                                     "items": {"type": "integer", "minimum": 0, "maximum": 100}}]}}}),
            "responses": {"200": _ok("the captured completion", {"type": "object"}), **call_errors}}},
        "/tokenize": {"post": {"requestBody": _json({"type": "object", "anyOf": [
            {"required": ["prompt"], "properties": {"prompt": {"type": "string", "maxLength": 200}}},
            {"required": ["messages"], "properties": {"messages": {"type": "array", "minItems": 1, "maxItems": 4,
                                                                   "items": _MESSAGE}}}]}), "responses": {
            "200": _ok("vLLM's /tokenize answer", {"type": "object"}), "400": _error("not a JSON object"),
            "502": _error("the policy server failed the call")}}},
        "/v1/models": {"get": {"responses": {"200": _ok("the public model", {"type": "object"})}}},
        "/policy": {"get": {"responses": {"200": _ok("how `policy` resolves", {"type": "object"})}}},
        "/policy/version": {"post": {"requestBody": _json({
            "type": "object", "required": ["version"], "properties": {"version": {"type": "integer", "minimum": 0}}}),
            "responses": {"200": _ok("the merged version", {"type": "object"}), "400": _error("not {version: N}"),
                          "409": _error("adapter sync, or a version below the current one")}}},
        "/healthz": {"get": {"responses": {"200": _ok("liveness and upstream state", {"type": "object"})}}},
        "/metrics": {"get": {"responses": {"200": {"description": "Prometheus text",
                                                   "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
    }
    return {"openapi": "3.1.0",
            "info": {"title": "fathom capture proxy", "version": "0.1.0"},
            "paths": paths,
            "components": {"schemas": components, "securitySchemes": {
                "sessionKey": {"type": "http", "scheme": "bearer", "description": "the session id"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key", "description": "the session id"},
            }}}
