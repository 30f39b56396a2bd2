"""The cache protocol of a run: what the prefix cache held when measuring began.

* ``reset``: empty the server's prefix cache before the first request, through its own
  endpoint: vLLM's and the embedded engine's ``POST /reset_prefix_cache`` (vLLM routes it
  only with ``VLLM_SERVER_DEV_MODE=1``, else 404), SGLang's ``POST /flush_cache``,
  llama.cpp's per-slot ``POST /slots/{id}?action=erase``. A server that refuses falls back
  to ``salt``, and the note says why.
* ``salt``: prefix every request's ``cache_salt`` (SGLang: ``extra_key``) with a salt new
  to this run, so nothing cached by an earlier run can hit, while requests of this run
  still share prefixes exactly as planned (tenants stay distinct: ``<salt>-<tenant>``).
* ``warm``: send as is; earlier runs' prefixes may hit.

What was asked, what was applied and why goes to ``run.json`` (:meth:`CacheProtocol.describe`).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import aiohttp

from loadgen.target import Target
from runfmt.run_sections import CacheProtocolSection
from workloads.errors import InputError

MODES = ("reset", "salt", "warm")


@dataclass
class CacheProtocol:
    requested: str
    applied: str
    salt: str | None = None
    note: str | None = None

    def salt_for(self, tenant: str | None) -> str | None:
        """The ``cache_salt`` a request of ``tenant`` carries."""
        if self.salt is None:
            return tenant
        return f"{self.salt}-{tenant}" if tenant else self.salt

    def describe(self) -> CacheProtocolSection:
        """What ``run.json`` records of it."""
        return CacheProtocolSection(self.requested, self.applied, self.salt, self.note)


async def apply_cache_protocol(
    session: aiohttp.ClientSession, target: Target, mode: str
) -> CacheProtocol:
    """Carry out ``mode`` against ``target`` before the run's first request."""
    if mode not in MODES:
        raise InputError("--cache", f"unknown cache protocol {mode!r}", "use reset, salt or warm")
    if mode == "warm":
        return CacheProtocol(mode, "warm")
    if mode == "salt":
        return _salted(mode, None, target)
    try:
        refusal = await _reset(session, target)
    except (aiohttp.ClientError, OSError) as exc:
        raise InputError(
            "--endpoint", f"cannot reach {target.base_url} to reset its cache: {exc}"
        ) from None
    if refusal is None:
        return CacheProtocol(mode, "reset")
    return _salted(mode, refusal, target)


def _salted(mode: str, why: str | None, target: Target) -> CacheProtocol:
    if target.capabilities.cache_salt:
        note = f"{why}; using a per-run cache salt instead" if why else None
        return CacheProtocol(mode, "salt", salt=f"ps{secrets.token_hex(6)}", note=note)
    cannot = f"{target.flavour} takes no per-request cache salt"
    note = f"{why}; {cannot}: cache kept as is" if why else f"{cannot}: cache kept as is"
    return CacheProtocol(mode, "warm", note=note)


async def _reset(session: aiohttp.ClientSession, target: Target) -> str | None:
    """Reset the server's prefix cache; ``None`` when done, else why it was not."""
    if target.capabilities.erase_slots:
        return await _erase_slots(session, target)
    path = target.capabilities.reset_path
    if path is None:
        return f"the {target.flavour} backend has no cache-reset endpoint"
    headers = target.headers()
    async with session.post(target.url(path), headers=headers) as resp:
        if resp.status < 300:
            return None
        why = target.kind.reset_hint
        hint = f" ({why})" if resp.status == 404 and why else ""
        return f"POST {path} answered {resp.status}{hint}"


async def _erase_slots(session: aiohttp.ClientSession, target: Target) -> str | None:
    headers = target.headers()
    async with session.get(target.url("/slots"), headers=headers) as resp:
        if resp.status >= 300:
            return f"GET /slots answered {resp.status} (llama-server needs --slots)"
        slots = await resp.json(content_type=None)
    for slot in slots if isinstance(slots, list) else []:
        path = f"/slots/{slot.get('id')}?action=erase"
        async with session.post(target.url(path), headers=headers) as resp:
            if resp.status >= 300:
                return f"POST {path} answered {resp.status}"
    return None
