"""Which model a turn calls, how much it thinks, and through which endpoint.

The model id: the session's pick (the `model` config option, which the manifest's
`llm.models` makes), else `$ACP_MODEL`, else the default given (pydantic-ai's
`provider:model` ids, e.g. `openai:gpt-4.1-mini`); a model object the handler gave for
that id runs as it is; `test` is a scripted model that answers text and calls no tool
(`test_model`).  The thinking: the session's `thought_level` option (which
`llm.reasoning_levels` makes), as pydantic-ai's `thinking` setting.  The endpoint: the route the client set with `providers/set` for
the provider id (`apiType` `openai`: the Chat Completions API, what every
OpenAI-compatible gateway serves; `anthropic`: the Messages API; with the route's
`baseUrl` and `headers`), else the provider's usual environment variables.  Header values
are credentials: they go to the endpoint and nowhere else.

The agent's own clients never retry behind the editor's back (`max_retries=0`, both
paths): a 429 or 5xx is the turn's error at once, with `retry_after` (failures.py).  They
live across turns (clients.py: one a route's endpoint and headers, or the environment's
variables, and event loop), so a turn reuses the provider connection of the one before.  A
Chat Completions stream must end with its finish reason: one cut before it is an error,
never a finished answer.

The first turn would import a provider's model code (the `openai` SDK and pydantic-ai's
model for it: ~0.5 s of CPU): `warm` does it in a background thread once the agent has
answered `initialize` (agent.py), everything the first request of the model's API loads
and nothing of another API, without the garbage collector walking the start-up's objects
meanwhile, so a first prompt does not wait for it, or waits for less.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..wire.errors import RpcError
from . import clients

if TYPE_CHECKING:
    from ..agent.providers import ProviderRoute
    from ..agent.turns import Turn

SERVED = ("openai", "anthropic")  # the api types a model route may use
TEST_MODEL = "test"  # the id of the scripted model for tests and a first try (test_model)
MODEL_OPTION = "model"  # the config option holding the session's pick
THOUGHT_OPTION = "thought_level"  # the config option holding the session's reasoning level
# a reasoning level (the manifest's `llm.reasoning_levels`) -> pydantic-ai's `thinking`
THINKING: dict[str, bool | str] = {
    "off": False,
    "on": True,
    **{e: e for e in ("minimal", "low", "medium", "high", "xhigh", "max")},
}


def model_id(turn: Turn, default: str | None) -> str | None:
    """The session's pick, else `$ACP_MODEL`, else `default`.  A pick equal to the
    picker's own default is no pick (a client that sends every option's default would
    otherwise hide `$ACP_MODEL`)."""
    picked = turn.session.config_raw.get(MODEL_OPTION) if turn.session.config_raw else None
    if type(picked) is str and picked and picked != turn.option_default(MODEL_OPTION):
        return picked
    return os.environ.get("ACP_MODEL", "").strip() or default


# what the first model request of each API imports, in the order it needs it: the client,
# pydantic-ai's model and provider, the client's resource for that API and its stream
# (both loaded on first use), the run's async backend and JSON parser, the price data
# (every pydantic-ai model loads it when built)
_FIRST_RUN = ("anyio._backends._asyncio", "jiter", "genai_prices.data")
_OPENAI = ("openai", "pydantic_ai.models.openai", "pydantic_ai.providers.openai")
_WARM = {
    "openai-chat": (
        *_OPENAI,
        "openai.resources.chat.chat",
        "openai.resources.chat.completions.completions",
        "openai.lib.streaming.chat",
        *_FIRST_RUN,
    ),
    "openai-responses": (
        *_OPENAI,
        "openai.resources.responses.responses",
        "openai.lib.streaming.responses",
        *_FIRST_RUN,
    ),
    "anthropic": (
        "anthropic",
        "pydantic_ai.models.anthropic",
        "pydantic_ai.providers.anthropic",
        "anthropic.resources.messages",
        "anthropic.lib.streaming",
        *_FIRST_RUN,
    ),
}
_OPENAI_IDS = ("openai", "openai-chat", "openai-responses")  # the prefixes env_model builds
_warmed = threading.Event()  # one warm-up a process


def openai_api(prefix: str) -> str:
    """The API an `openai*:` id is spoken in from the environment (env_model): `openai:`
    is Chat Completions when `OPENAI_BASE_URL` names a gateway, else Responses."""
    if prefix == "openai":
        return "openai-chat" if os.environ.get("OPENAI_BASE_URL") else "openai-responses"
    return prefix


def apis_to_warm(llm: Mapping[str, Any]) -> list[str]:
    """The APIs (keys of `_WARM`) whose model code a first turn likely imports: the one
    of `$ACP_MODEL` or the manifest's default model when it names one (for an `openai*:`
    id of a manifest the editor routes, Chat Completions first: a route speaks it),
    else each provider whose variables are set, else every one a route may speak for a
    manifest that lets the editor route the model (`providers/set`)."""
    routed = bool(llm.get("provider"))
    name = os.environ.get("ACP_MODEL", "").strip() or str(llm.get("default_model") or "")
    prefix = name.partition(":")[0] if ":" in name else ""
    if prefix in _OPENAI_IDS:
        api = openai_api(prefix)
        return ["openai-chat", api] if routed and api != "openai-chat" else [api]
    if prefix == "anthropic":
        return ["anthropic"]
    if name == TEST_MODEL or prefix:
        return []  # the test model, or a provider pydantic-ai builds itself
    out = [openai_api("openai")] if any(k.startswith("OPENAI_") for k in os.environ) else []
    out += ["anthropic"] if any(k.startswith("ANTHROPIC_") for k in os.environ) else []
    return out or (["openai-chat", "anthropic"] if routed else [])


def warm(llm: Mapping[str, Any]) -> threading.Thread | None:
    """Import the model code of `apis_to_warm(llm)` in a daemon thread (once a process);
    returns the thread (None: nothing to do).  An import that fails is left to the turn,
    which says why.

    Then the platform facts the client's first request sends (`_platform`: a `uname -p`
    process once a process, in the turn otherwise).

    The cyclic garbage collector does not run meanwhile: what loads is hundreds of
    thousands of long-lived objects (classes, functions, the price table), and each
    collection walked what the start-up had loaded again (a quarter of the warm-up's
    CPU, ~0.12 s of ~0.5).  Once it has loaded, everything loaded so far is frozen
    (`gc.freeze`: left out of every later collection, so a full one during a turn walks
    the turns' objects, not the code's) and the collector runs again as before."""
    apis = apis_to_warm(llm)
    if not apis or _warmed.is_set():
        return None
    _warmed.set()

    def run() -> None:
        collecting = gc.isenabled()
        gc.disable()
        try:
            for api in apis:
                for module in _WARM[api]:
                    with contextlib.suppress(Exception):
                        importlib.import_module(module)
            with contextlib.suppress(Exception):
                _platform()
        finally:
            gc.freeze()
            if collecting:
                gc.enable()

    thread = threading.Thread(target=run, name="acp-model-warm", daemon=True)
    thread.start()
    return thread


def _platform() -> None:
    """What the provider's client sends as headers on its first request (the OpenAI and
    Anthropic SDKs: `platform.platform()`, the OS release): the standard library keeps it
    for the process, and finding the processor runs `uname -p` once."""
    import platform

    platform.platform()
    with contextlib.suppress(OSError):
        platform.freedesktop_os_release()


def thinking(turn: Turn) -> bool | str | None:
    """pydantic-ai's `thinking` setting for the session's reasoning level (the
    `thought_level` option, its default until the user picks; None: no such option)."""
    raw = turn.session.config_raw or {}
    level = raw.get(THOUGHT_OPTION, turn.option_default(THOUGHT_OPTION))
    return THINKING.get(level) if type(level) is str else None


def model_for(
    turn: Turn,
    provider_id: str | None,
    default: str | None,
    models: Mapping[str, Any] | None = None,
) -> Any:
    """What to hand pydantic-ai as `model=`: the object `models` has for the id (a model
    the handler built itself), else a model bound to the client's route when it set one
    for `provider_id`, else the id (pydantic-ai reads the environment)."""
    name = model_id(turn, default)
    if models and name and name in models:
        return models[name]
    if name == TEST_MODEL:
        return test_model()
    route = turn.provider(provider_id) if provider_id else None
    if route is None:
        return env_model(name) if name else None
    if not name:
        raise RpcError(-32602, f"provider {route.provider_id!r} is routed but no model is set")
    return routed_model(route, name.split(":", 1)[1] if ":" in name else name)


def test_model() -> Any:
    """The model `test` stands for: pydantic-ai's `TestModel` answering text and calling
    no tool.  pydantic-ai's own `test` calls every tool with made-up arguments, which
    through a client that approves everything writes a file `a` and runs a command `a`;
    tests that need tool calls script them (`FunctionModel`)."""
    from pydantic_ai.models.test import TestModel

    return TestModel(call_tools=[])


def routed_model(route: ProviderRoute, name: str) -> Any:
    """A pydantic-ai model speaking `route.api_type` to `route.base_url` with its headers,
    on the client kept for that route on this event loop (clients.py): a route the client
    changed is another client."""
    api = route.api_type
    if api not in SERVED:
        raise RpcError(
            -32602,
            f"provider {route.provider_id!r} is routed to API type {api!r}, which this "
            f"agent's model cannot speak ({', '.join(SERVED)})",
        )
    key = ("route", api, route.base_url, clients.digest(sorted(route.headers.items())))
    return clients.model(
        key, name, lambda: _routed_client(route), lambda client: _routed_model(api, client, name)
    )


def _routed_client(route: ProviderRoute) -> Any:
    """The provider SDK client of a route: its base URL, its headers, no retry."""
    headers = dict(route.headers)
    if route.api_type == "openai":
        from openai import AsyncOpenAI

        auth = _header(headers, "authorization")
        key = auth[7:] if auth and auth.lower().startswith("bearer ") else "unused"
        return AsyncOpenAI(
            base_url=route.base_url, api_key=key, default_headers=headers, max_retries=0
        )
    from anthropic import AsyncAnthropic

    key = _header(headers, "x-api-key") or "unused"
    return AsyncAnthropic(
        base_url=route.base_url, api_key=key, default_headers=headers, max_retries=0
    )


def _routed_model(api: str, client: Any, name: str) -> Any:
    if api == "openai":
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        return OpenAIChatModel(
            name, provider=OpenAIProvider(openai_client=client), profile=_chat_profile()
        )
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    return AnthropicModel(name, provider=AnthropicProvider(anthropic_client=client))


def env_model(name: str) -> Any:
    """The model for an id read from the environment's keys and base URL: for `openai:`,
    `openai-chat:`, `openai-responses:` and `anthropic:` ids a model whose client does not
    retry (`openai:` is spoken as Chat Completions when `OPENAI_BASE_URL` names a
    gateway), on the client kept for the provider's variables on this event loop
    (clients.py); any other id as it is (pydantic-ai builds it).  A missing key is
    pydantic-ai's `UserError` naming the variable (failures.py: a configuration error)."""
    prefix, colon, model = name.partition(":")
    if not colon:
        return name
    if prefix in _OPENAI_IDS:
        api = openai_api(prefix)
        key = ("env", "openai", _env_digest("OPENAI_"))
        return clients.model(
            key, (api, model), _env_openai_client, lambda c: _env_openai(api, c, model)
        )
    if prefix == "anthropic":
        key = ("env", "anthropic", _env_digest("ANTHROPIC_"))
        return clients.model(key, model, _env_anthropic_client, lambda c: _env_anthropic(c, model))
    return name


# what else a provider client reads from the environment when it is built
_CLIENT_ENV = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)


def _env_digest(prefix: str) -> str:
    """A digest of the variables a provider's client is built from (its `prefix`ed ones:
    key, base URL, organisation...; proxies and CA files)."""
    env = os.environ
    return clients.digest(
        sorted((k, v) for k, v in env.items() if k.startswith(prefix) or k.upper() in _CLIENT_ENV)
    )


def _env_openai_client() -> Any:
    from pydantic_ai.providers.openai import OpenAIProvider

    return OpenAIProvider().client.with_options(max_retries=0)


def _env_openai(api: str, client: Any, model: str) -> Any:
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(openai_client=client)
    if api == "openai-chat":  # a gateway's base URL: Chat Completions
        return OpenAIChatModel(model, provider=provider, profile=_chat_profile())
    return OpenAIResponsesModel(model, provider=provider)


def _env_anthropic_client() -> Any:
    from pydantic_ai.providers.anthropic import AnthropicProvider

    return AnthropicProvider().client.with_options(max_retries=0)


def _env_anthropic(client: Any, model: str) -> Any:
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    return AnthropicModel(model, provider=AnthropicProvider(anthropic_client=client))


def _chat_profile() -> Any:
    """A Chat Completions stream that ends without `finish_reason` was cut off: an error
    (pydantic-ai's `ModelConnectionError`), never a finished answer."""
    from pydantic_ai.profiles.openai import OpenAIModelProfile

    return OpenAIModelProfile(openai_chat_streaming_requires_finish_reason=True)


def _header(headers: dict[str, str], name: str) -> str | None:
    return next((v for k, v in headers.items() if k.lower() == name), None)


__all__ = [
    "MODEL_OPTION",
    "SERVED",
    "TEST_MODEL",
    "THINKING",
    "THOUGHT_OPTION",
    "env_model",
    "model_for",
    "model_id",
    "routed_model",
    "test_model",
    "thinking",
]
