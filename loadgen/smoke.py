"""One small request before a run starts, so that a run that cannot work fails at once
with the server's own words (a wrong model name, a missing API key, an API the server
does not serve, token ids outside its vocabulary) instead of N times during the run.

The request has the run's shape (same API, model, extras) with a prompt too short to
fill one KV-cache block, so it leaves nothing in the prefix cache that a measured
request could hit; it asks for one output token.
"""

from __future__ import annotations

import json

import aiohttp

from loadgen.adapters import Outgoing, RequestParams, adapter_for
from loadgen.adapters.base import error_message, short
from loadgen.target import Target
from workloads.errors import InputError
from workloads.plan import Prompt, RequestSpec

#: The smoke request's text prompt (a few tokens in any vocabulary).
SMOKE_TEXT = "Hello"


def smoke_request(target: Target, token_ids: bool) -> RequestSpec:
    """A one-output-token request of a few tokens: ids at both ends of the vocabulary
    when the run sends token ids (so a wrong ``--vocab-size`` shows now), else text."""
    top = (target.vocab_size or 2) - 1
    ids = (min(1, top), top)
    text = None if token_ids else SMOKE_TEXT
    return RequestSpec(id="smoke-test", prompt=Prompt.of_tokens(ids), max_tokens=1, text=text)


async def smoke_test(
    target: Target, *, token_ids: bool, params: RequestParams, timeout_s: float | None
) -> None:
    """Send one request as the run will; ``InputError`` with the server's message if it fails."""
    adapter = adapter_for(target, params)
    spec = smoke_request(target, token_ids and adapter.takes_token_ids)
    prompt = spec.text if spec.text is not None else [int(t) for t in spec.prompt.token_ids(2**31)]
    body = adapter.body(Outgoing(spec, prompt))
    url = target.url(adapter.path)
    where = f"the test request (POST {adapter.path}, one output token)"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
            session.post(url, data=json.dumps(body), headers=target.headers()) as resp,
        ):
            raw = await resp.read()
            status = resp.status
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        reason = str(exc) or type(exc).__name__
        raise InputError("--endpoint", f"{where} failed: {reason}") from None
    if status >= 400:
        try:
            message = error_message(json.loads(raw))
        except ValueError:
            message = short(raw.decode("utf-8", "replace"))
        raise InputError("--endpoint", f"{where} failed: HTTP {status}: {message}", _fix(status))
    stream = adapter.new_stream(False)
    stream.feed(raw)
    stream.close()
    problem = stream.error or stream.malformed
    if problem is None and not stream.done:
        problem = "the stream ended before its end-of-stream event"
    if problem is not None:
        raise InputError("--endpoint", f"{where} failed: {problem}")


def _fix(status: int) -> str | None:
    if status in (401, 403):
        return "pass the server's API key (--api-key or PREFILLSCOPE_API_KEY)"
    if status == 404:
        return "check --model and --api against what the server serves"
    return None
