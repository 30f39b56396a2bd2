"""Tenants as a server scopes them: ``--tenant-a``/``--tenant-b`` of ``prefillscope isolation``.

A tenant is one or more of (the flag repeated to combine them):

* ``salt:VALUE`` — the request's ``cache_salt`` (vLLM, the embedded engine; SGLang's
  ``extra_key``);
* ``lora:NAME`` — a LoRA adapter, named as the request's model (SGLang: ``lora_path``);
* ``key:VALUE`` — an API key of its own, sent as ``Authorization: Bearer``;
* ``header:NAME=VALUE`` — a header a gateway scopes by (``X-Tenant=a``);
* ``user:VALUE`` — the OpenAI ``user`` field.

Without the flags: two salts where the server takes them, else two ``user`` values.
Nothing a tenant carries is written in clear: keys and header values are registered as
secrets (``runtime.redact``) and every value but a LoRA name is described by a short
hash (``Tenant.describe``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from loadgen.flavours import flavour as flavour_named
from runtime import redact
from workloads.errors import InputError

FORMS = ("salt", "lora", "key", "header", "user")
_EXAMPLE = "e.g. salt:team-a, lora:adapter-a, key:sk-…, header:X-Tenant=a, user:u1"


def digest(value: str) -> str:
    """A short, stable stand-in for a value that must not be written (``#`` + 8 hex)."""
    return "#" + hashlib.sha256(value.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class Tenant:
    """What one tenant's requests carry."""

    role: str
    salt: str | None = None
    lora: str | None = None
    api_key: str | None = field(default=None, repr=False)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    user: str | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, role: str, items: Sequence[str], flag: str) -> Tenant:
        """A tenant from its flag's items (``salt:abc``, ``header:X-Tenant=a`` …)."""
        found: dict[str, Any] = {}
        headers: list[tuple[str, str]] = []
        for item in items:
            form, sep, value = item.partition(":")
            form = form.strip().lower()
            if not sep or form not in FORMS or not value:
                raise InputError(flag, f"{item!r} is not FORM:VALUE ({', '.join(FORMS)})", _EXAMPLE)
            if form == "header":
                name, eq, text = value.partition("=")
                if not eq or not name.strip() or not text:
                    raise InputError(flag, f"{item!r}: a header is NAME=VALUE", "header:X-Tenant=a")
                headers.append((name.strip(), text))
                continue
            key = "api_key" if form == "key" else form
            if key in found:
                raise InputError(flag, f"gives {form} twice", f"one {form}: per tenant")
            found[key] = value
        if not found and not headers:
            raise InputError(flag, "is empty", _EXAMPLE)
        return cls(role, headers=tuple(headers), **found)

    def secrets(self) -> list[str]:
        """Values never to be written: the API key and the header values."""
        return [v for v in (self.api_key, *(text for _, text in self.headers)) if v]

    def body_fields(self) -> dict[str, Any]:
        """Fields this tenant adds to every request body."""
        return {"user": self.user} if self.user else {}

    def describe(self) -> list[str]:
        """The tenant as written in outputs: forms, LoRA names, hashes of the rest."""
        out = [f"salt:{digest(self.salt)}"] if self.salt else []
        out += [f"lora:{self.lora}"] if self.lora else []
        out += [f"key:{redact.MASK}"] if self.api_key else []
        out += [f"header:{name}={digest(text)}" for name, text in self.headers]
        out += [f"user:{digest(self.user)}"] if self.user else []
        return out

    def same_scope(self, other: Tenant) -> bool:
        """Whether the two tenants send the same scoping keys (then nothing separates them)."""
        keys = ("salt", "lora", "api_key", "headers", "user")
        return all(getattr(self, k) == getattr(other, k) for k in keys)


def default_items(flavour: str) -> tuple[list[str], list[str]]:
    """The two tenants' items when the flags are not given: salts where the server takes
    them, else the ``user`` field."""
    form = "salt" if flavour_named(flavour).capabilities.cache_salt else "user"
    return [f"{form}:prefillscope-tenant-a"], [f"{form}:prefillscope-tenant-b"]


def tenants(
    flavour: str, items_a: Sequence[str] | None, items_b: Sequence[str] | None
) -> tuple[Tenant, Tenant, list[str]]:
    """The victim (``--tenant-a``) and the attacker (``--tenant-b``), and notes on what the
    server will not honour."""
    default_a, default_b = default_items(flavour)
    victim = Tenant.parse("victim", items_a or default_a, "--tenant-a")
    attacker = Tenant.parse("attacker", items_b or default_b, "--tenant-b")
    notes = []
    if victim.same_scope(attacker):
        notes.append("--tenant-a and --tenant-b send the same scoping keys: one tenant, a leak")
    for secret in (*victim.secrets(), *attacker.secrets()):
        redact.register(secret)
    if not flavour_named(flavour).capabilities.cache_salt and (victim.salt or attacker.salt):
        notes.append(f"{flavour} takes no cache_salt: the salts are not sent")
    return victim, attacker, notes
