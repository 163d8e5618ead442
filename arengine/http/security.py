"""What a web page must not make a browser do to an arengine server, as plain ASGI.

A server on loopback with API keys off (the default) is reachable by every page the user opens:
- **DNS rebinding**: a page whose name resolves to 127.0.0.1 reads the API as its own origin.
  The `Host` header still names the page's domain: only `allowed_hosts` pass (loopback names by
  default when bound to loopback), else 400 `forbidden_host`.
- **Requests without a preflight**: a page may send a cross-origin `POST` of a form
  (`multipart/form-data`, `application/x-www-form-urlencoded`) or `text/plain` without asking
  first, and so start costly work. Browsers name the page's origin in `Origin` on every `POST`;
  a `POST` whose `Origin` is neither the server's own nor one of `cors_origins` is refused (403
  `forbidden_origin`). Clients that are not browsers (curl -F, the CLI, `arengine.client`) send
  no `Origin` and are not affected: `curl -F file=@x.flac` keeps working, a form on a page does
  not. (`/v1/render` also takes only `application/json`, `/v1/recognize` only multipart or audio.)
- **Cross-site WebSockets**: CORS does not apply to a WebSocket, so any page may open one to the
  server; a handshake (`WS /v1/listen`) whose `Origin` is neither the server's own nor one of
  `cors_origins` is refused the same way, before it is accepted.
- **Framing and sniffing**: every answer carries `X-Content-Type-Options: nosniff`,
  `X-Frame-Options: DENY`, `Referrer-Policy: no-referrer` and a `Content-Security-Policy` that
  allows only the server's own files (the page and `/docs` load nothing from elsewhere).
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from arengine.errors import ErrorCode, Forbidden
from arengine.http.errors import error_response

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "media-src 'self' blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
"""The page: its own scripts and styles only; recordings play from `blob:` URLs."""
_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]


def is_loopback(host: str) -> bool:
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def host_name(value: str) -> str:
    """The name of a `Host` header, without its port: `[::1]:8000` is `::1`.

    Only a port of digits is taken off: `127.0.0.1:1@evil` stays whole (and so matches no
    allowed name), where taking all after the last colon let it pass as `127.0.0.1`.
    """
    value = value.strip().lower()
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        return name if _is_port(rest) else value
    name, colon, port = value.rpartition(":")
    return name if colon and ":" not in name and _is_port(":" + port) else value


def _is_port(text: str) -> bool:
    """Whether `text` is what may follow a Host's name: nothing, or `:` and a port number."""
    port = text[1:]
    return text == "" or (text[:1] == ":" and (port == "" or (port.isascii() and port.isdigit())))


class SecurityMiddleware:
    """The Host and Origin checks and the response headers above.

    `hosts`: accepted Host names (`*`: any); `origins`: cross-origin pages allowed to POST;
    `csp`: a policy per path (one ending in `/`: for everything under it), `PAGE_CSP` elsewhere.
    """

    def __init__(
        self,
        app: ASGIApp,
        hosts: Iterable[str],
        origins: Iterable[str] = (),
        csp: dict[str, str] | None = None,
    ) -> None:
        self.app = app
        self.hosts = frozenset(host.strip().lower() for host in hosts)
        self.origins = frozenset(origin.strip().rstrip("/").lower() for origin in origins)
        self.csp = csp or {}

    def _policy(self, path: str) -> str:
        if path in self.csp:
            return self.csp[path]
        under = [prefix for prefix in self.csp if prefix.endswith("/") and path.startswith(prefix)]
        return self.csp[max(under, key=len)] if under else PAGE_CSP

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        host = headers.get(b"host", b"").decode("latin-1")
        method = "WEBSOCKET" if scope["type"] == "websocket" else scope["method"]
        error = self._refusal(method, host, headers.get(b"origin"))
        policy = self._policy(scope["path"]).encode()

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = [*_HEADERS, (b"content-security-policy", policy)]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        if error is None:
            await self.app(scope, receive, send_with_headers)
            return
        scope["app"].state.metrics.reject(error.code)
        await error_response(error.code, error.message)(scope, receive, send_with_headers)

    def _refusal(self, method: str, host: str, origin: bytes | None) -> Forbidden | None:
        if "*" not in self.hosts and host_name(host) not in self.hosts:
            return Forbidden(
                f"Host {host!r} is not one of this server's names; the operator can add it to "
                "allowed_hosts",
                code=ErrorCode.FORBIDDEN_HOST,
            )
        if method not in ("POST", "WEBSOCKET") or origin is None:
            return None
        sent = origin.decode("latin-1").strip().lower()
        if _same_origin(sent, host) or sent.rstrip("/") in self.origins:
            return None
        what = "a WebSocket" if method == "WEBSOCKET" else "a POST"
        return Forbidden(
            f"{what} from the page of {sent!r}, another origin: add it to cors_origins to allow it"
        )


def _same_origin(origin: str, host: str) -> bool:
    """Whether a page of `origin` is the server's own: the same host and port, or the same name
    where a proxy passed on a Host without its port (nginx's `$host`)."""
    netloc, host = urlsplit(origin).netloc, host.strip().lower()
    return netloc == host or (host_name(host) == host and host_name(netloc) == host)
