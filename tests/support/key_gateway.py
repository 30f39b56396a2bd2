"""A gateway that takes its key in the URL's query string, as Azure-style deployments do.

``QueryKeyGateway(upstream, name, key)`` forwards every request to ``upstream`` (an
embedded engine's URL) when its query string carries ``name=key``, and refuses it with
HTTP 401 otherwise; ``log`` holds ``"METHOD /path?query -> status"`` for every request it
got, so a test can see that the query arrived on each of them (``/v1/models``, the
completions, ``/metrics``, ``/tokenize``). It runs on its own loop in a thread.
"""

from __future__ import annotations

from aiohttp import ClientSession, web
from threaded_app import ThreadedApp


class QueryKeyGateway(ThreadedApp):
    def __init__(self, upstream: str, name: str, key: str) -> None:
        super().__init__()
        self.upstream = upstream
        self.name = name
        self.key = key
        self.log: list[str] = []
        self._session: ClientSession | None = None

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/{tail:.*}", self._handle)

    async def started(self) -> None:
        self._session = ClientSession()

    async def stopping(self) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def refused(self) -> list[str]:
        """The log lines of the requests refused for a missing or wrong key."""
        return [line for line in self.log if line.endswith("-> 401")]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.query.get(self.name) != self.key:
            self.log.append(f"{request.method} {request.path_qs} -> 401")
            return web.json_response({"error": {"message": "missing key"}}, status=401)
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() == "authorization"}
        if body:
            headers["Content-Type"] = "application/json"
        async with self._session.request(
            request.method, self.upstream + request.path, data=body, headers=headers
        ) as up:
            self.log.append(f"{request.method} {request.path_qs} -> {up.status}")
            resp = web.StreamResponse(status=up.status)
            resp.content_type = up.content_type
            await resp.prepare(request)
            async for piece in up.content.iter_any():
                await resp.write(piece)
            await resp.write_eof()
            return resp
