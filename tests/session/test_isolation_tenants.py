"""``--tenant-a``/``--tenant-b``: the forms a tenant takes, and what is written of them."""

from __future__ import annotations

import pytest

from session.isolation_tenants import Tenant, default_items, tenants
from workloads.errors import InputError


def test_every_form_parses_and_combines():
    t = Tenant.parse(
        "victim", ["salt:s1", "lora:ad", "key:sk-abcdef123", "header:X-Tenant=a", "user:u1"], "-a"
    )
    assert (t.salt, t.lora, t.api_key, t.headers, t.user) == (
        "s1", "ad", "sk-abcdef123", (("X-Tenant", "a"),), "u1",
    )  # fmt: skip
    assert t.body_fields() == {"user": "u1"}
    assert t.secrets() == ["sk-abcdef123", "a"]


def test_what_is_written_of_a_tenant_is_hashed_or_masked():
    t = Tenant.parse(
        "v", ["salt:hush", "key:sk-abcdef123", "header:X-Key=topsecret", "user:bob"], "-a"
    )
    described = " ".join(t.describe())
    for value in ("hush", "sk-abcdef123", "topsecret", "bob"):
        assert value not in described
    assert described.startswith("salt:#") and "key:REDACTED" in described
    assert "header:X-Key=#" in described and "user:#" in described


@pytest.mark.parametrize(
    "items", [["salt"], ["colour:red"], ["header:X"], ["salt:a", "salt:b"], ["key:"]]
)
def test_a_bad_tenant_names_its_flag(items):
    with pytest.raises(InputError, match="--tenant-b"):
        Tenant.parse("attacker", items, "--tenant-b")


def test_defaults_follow_what_the_server_scopes_by():
    assert default_items("vllm")[0][0].startswith("salt:")
    assert default_items("llamacpp")[0][0].startswith("user:")
    victim, _, notes = tenants("llamacpp", ["salt:a"], ["salt:b"])
    assert notes == ["llamacpp takes no cache_salt: the salts are not sent"] and victim.salt == "a"
    same = tenants("vllm", ["salt:a"], ["salt:a"])[2]
    assert same and "one tenant" in same[0]
