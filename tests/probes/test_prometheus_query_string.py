"""``--prometheus http://gw/prom?token=T``: a token gateway's key in the URL's query goes
with every API request as a parameter, and the API path goes after the URL's own path
(``/prom/api/v1/query?token=T&query=…``), never after the query (the token corrupted, a
404). A gateway on loopback answers only with the token, at its own path."""

from __future__ import annotations

from aiohttp import web
from threaded_app import ThreadedApp

from probes.prometheus_source import PrometheusSource

TOKEN = "T0k3n-gw"


class TokenGateway(ThreadedApp):
    """Prometheus's query API under ``/prom``, for requests that carry ``token=TOKEN``."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, dict[str, str]]] = []

    def routes(self, app: web.Application) -> None:
        async def query(request: web.Request) -> web.Response:
            self.seen.append((request.path, dict(request.query)))
            if request.query.get("token") != TOKEN:
                return web.json_response({"status": "error", "error": "bad token"}, status=401)
            result = [{"metric": {"__name__": "vllm:num_requests_running"}, "value": [0, "1"]}]
            data = {"resultType": "vector", "result": result}
            return web.json_response({"status": "success", "data": data})

        app.router.add_get("/prom/api/v1/query", query)


def test_the_query_string_of_the_prometheus_url_is_kept() -> None:
    with TokenGateway() as gateway:
        source = PrometheusSource(f"{gateway.url}/prom?token={TOKEN}")
        rows = source._get('sum(vllm:num_requests_running{job="x"})')
    assert rows and rows[0]["value"][1] == "1"
    (path, params), *_ = gateway.seen
    assert path == "/prom/api/v1/query"  # the API path after the URL's path
    assert params["token"] == TOKEN and params["query"].startswith("sum(")
