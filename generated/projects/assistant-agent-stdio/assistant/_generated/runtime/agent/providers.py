"""LLM provider routing (`providers/list`, `providers/set`, `providers/disable`)."""

from __future__ import annotations

from typing import Any

from ..wire.errors import invalid_params
from ..wire.fields import need
from ..wire.masking import mask_url, register_route_secrets, url_secrets


class ProviderRoute:
    """The current routing of one LLM provider (headers never shown in repr)."""

    __slots__ = ("api_type", "base_url", "headers", "provider_id")

    def __init__(self, provider_id: str, api_type: str, base_url: str, headers: dict[str, str]):
        self.provider_id = provider_id
        self.api_type = api_type
        self.base_url = base_url
        self.headers = headers

    def __repr__(self) -> str:
        return (
            f"ProviderRoute({self.provider_id!r}, api_type={self.api_type!r}, "
            f"base_url={mask_url(self.base_url)!r}, headers=<{len(self.headers)} hidden>)"
        )


class Providers:
    """The manifest's providers and their current routes (of one connection)."""

    __slots__ = ("_providers", "_routes")

    def __init__(self, manifest: dict[str, Any]) -> None:
        self._providers: dict[str, dict[str, Any]] = {}
        self._routes: dict[str, ProviderRoute | None] = {}
        for p in manifest.get("providers") or ():
            self._providers[p["id"]] = p
            d = p.get("default")
            self._routes[p["id"]] = (
                ProviderRoute(p["id"], d["api_type"], d["base_url"], {}) if d else None
            )

    def __bool__(self) -> bool:
        """Whether the manifest declares any provider."""
        return bool(self._providers)

    def route(self, pid: str) -> ProviderRoute | None:
        return self._routes.get(pid)

    async def list_routes(self, params: Any, request: Any) -> Any:
        """`providers/list`: each provider and its current route (the URL masked)."""
        out = []
        for pid, p in self._providers.items():
            route = self._routes.get(pid)
            out.append(
                {
                    "providerId": pid,
                    "supported": list(p.get("supported") or ()),
                    "required": bool(p.get("required")),
                    "current": {"apiType": route.api_type, "baseUrl": mask_url(route.base_url)}
                    if route
                    else None,
                }
            )
        return {"providers": out}

    async def set_route(self, params: Any, request: Any) -> Any:
        """`providers/set`: route a provider (its secrets are masked in logs from now on)."""
        pid = need(params, "providerId", str)
        api = need(params, "apiType", str)
        base = need(params, "baseUrl", str)
        headers = params.get("headers") or {}
        if type(headers) is not dict or any(
            type(k) is not str or type(v) is not str for k, v in headers.items()
        ):
            raise invalid_params(
                "params.headers: expected an object of strings",
                [{"loc": ["params", "headers"], "msg": "expected an object of strings"}],
            )
        p = self._providers.get(pid)
        if p is None:
            raise invalid_params(
                f"unknown provider {pid!r}",
                [{"loc": ["params", "providerId"], "msg": "unknown provider"}],
            )
        if api not in (p.get("supported") or ()):
            raise invalid_params(
                f"provider {pid!r} does not support apiType {api!r}",
                [
                    {
                        "loc": ["params", "apiType"],
                        "msg": "unsupported apiType",
                        "supported": list(p["supported"]),
                    }
                ],
            )
        register_route_secrets(request, [*headers.values(), *url_secrets(base)])
        self._routes[pid] = ProviderRoute(pid, api, base, dict(headers))
        return {}

    async def disable(self, params: Any, request: Any) -> Any:
        """`providers/disable`: drop a provider's route (not a required one)."""
        pid = need(params, "providerId", str)
        p = self._providers.get(pid)
        if p is None:
            return {}
        if p.get("required"):
            raise invalid_params(
                f"provider {pid!r} is required and cannot be disabled",
                [{"loc": ["params", "providerId"], "msg": "required provider"}],
            )
        self._routes[pid] = None
        return {}
