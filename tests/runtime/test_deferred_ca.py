"""aiohttp's default TLS contexts load their CA certificates at the first handshake, not at
import — and still verify (``runtime.deferred_ca``).

Certificates are made with the ``openssl`` command (a CA, a certificate it signs for
127.0.0.1, and a second CA that signed nothing); the server is the standard library's
over loopback; each client is a fresh interpreter with ``SSL_CERT_FILE`` set, as a user's
``bench --endpoint https://…`` would be.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")

#: Through the package the CLI imports first, a GET of ``argv[1]`` with aiohttp's
#: default TLS (``ssl=True``, or ``ssl=False`` when ``argv[2]`` says so): the contexts'
#: state before and after, and what the request got.
CLIENT = """
import asyncio, json, sys
import prefillscope.cli
import aiohttp, aiohttp.connector as connector
from runtime.deferred_ca import deferred

def state():
    context = connector._SSL_CONTEXT_VERIFIED
    return {"deferred": deferred(context), "certs": context.cert_store_stats()["x509_ca"]}

async def get():
    async with aiohttp.ClientSession() as session:
        try:
            async with session.get(sys.argv[1], ssl=sys.argv[2] == "verify") as resp:
                return {"status": resp.status, "body": await resp.text()}
        except aiohttp.ClientConnectorCertificateError as exc:
            return {"error": "certificate", "message": str(exc)}

before = state()
got = asyncio.run(get())
print(json.dumps({"before": before, "got": got, "after": state()}))
"""


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(directory: Path, name: str) -> None:
    _openssl(
        *("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"),
        *("-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2"),
        *("-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE"),
        *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
        cwd=directory,
    )


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("certs")
    _ca(directory, "ca")
    _ca(directory, "other-ca")
    _openssl(
        *("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
        *("-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=127.0.0.1"),
        cwd=directory,
    )
    (directory / "leaf.ext").write_text(
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n"
    )
    _openssl(
        *("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key"),
        *("-CAcreateserial", "-out", "leaf.pem", "-days", "2", "-extfile", "leaf.ext"),
        cwd=directory,
    )
    return directory


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def https_url(certs: Path) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs / "leaf.pem", certs / "leaf.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def _client(url: str, bundle: Path, mode: str = "verify") -> dict:
    env = {**os.environ, "SSL_CERT_FILE": str(bundle), "SSL_CERT_DIR": str(bundle.parent)}
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, url, mode],
        capture_output=True, text=True, timeout=120, check=True, env=env,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_bundle_loads_at_the_first_handshake_and_verifies(https_url: str, certs: Path) -> None:
    seen = _client(https_url, certs / "ca.pem")
    assert seen["before"] == {"deferred": True, "certs": 0}  # nothing loaded by the import
    assert seen["got"] == {"status": 200, "body": "hello"}  # verified against SSL_CERT_FILE
    assert seen["after"] == {"deferred": False, "certs": 1}


def test_verification_still_refuses_a_certificate_nobody_trusts(
    https_url: str, certs: Path
) -> None:
    seen = _client(https_url, certs / "other-ca.pem")
    assert seen["got"]["error"] == "certificate"
    assert "certificate verify failed" in seen["got"]["message"]
    assert seen["after"]["deferred"] is False  # it was loaded, and it said no


def test_an_unverified_request_still_connects(https_url: str, certs: Path) -> None:
    seen = _client(https_url, certs / "other-ca.pem", mode="insecure")
    assert seen["got"] == {"status": 200, "body": "hello"}
    assert seen["after"]["deferred"] is True  # the verified context was never needed


def test_only_aiohttps_contexts_are_deferred(certs: Path) -> None:
    """Contexts made after the import load their certificates as they always did."""
    code = (
        "import json, ssl, loadgen.exchange\n"
        "print(json.dumps(ssl.create_default_context().cert_store_stats()['x509_ca']))"
    )
    env = {**os.environ, "SSL_CERT_FILE": str(certs / "ca.pem")}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == 1
