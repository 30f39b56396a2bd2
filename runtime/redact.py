"""Secrets never reach an output: the one redaction every writer and printer goes through.

What counts as a secret:

* the value of a secret flag, in ``--flag VALUE`` or ``--flag=VALUE`` form: ``--api-key``,
  ``--token``, ``--hf-token``, any flag whose last word is ``key`` or ``token``, any flag
  containing ``password`` or ``secret`` (``--max-tokens`` is not one: ``tokens`` is a count);
* the value of an environment assignment ``NAME=VALUE`` in a command (``env HF_TOKEN=… vllm
  serve …``) whose name has a ``KEY``, ``TOKEN``, ``SECRET``, ``PASSWORD``, ``PASSWD``,
  ``PASS``, ``AUTH`` or ``CREDENTIAL(S)`` word (``MAX_NUM_BATCHED_TOKENS`` has none:
  ``TOKENS`` is a count, ``TOKENIZERS`` a library) — the one rule, also for the server
  environment a run records (``probes.server_process``);
* the password of a URL (``user:PW@host`` → ``user:REDACTED@host``), and the values of
  its query parameters whose name is key-like (``?api_key=K``, ``&sig=…``, ``token``,
  ``access_token``, ``code``, ``X-Amz-Signature`` …: ``secret_query_name``), as Azure-style
  deployments and gateways pass keys — wherever a URL is written out in text;
* the value of an ``Authorization``, ``Proxy-Authorization``, ``api-key`` or ``x-api-key``
  header written out in text, and ``Bearer …`` / ``Basic …`` credentials wherever they stand;
* and any of those values *wherever else it appears*: once a secret is known (``register``,
  ``register_argv``: the command line, the API key, the environment's secret variables), it
  is replaced in every text written, so a key a server echoes in a 401 body never reaches
  ``requests.parquet``, a report or the screen.

``text`` redacts a string, ``argv`` a command line, ``document`` a JSON-like value;
``guarded_streams`` makes stdout and stderr redact whatever is printed.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TextIO

MASK = "REDACTED"
#: Shorter values are masked where they stand (after a secret flag) but not searched for
#: everywhere: replacing every "1" of a run because someone's token was "1" would wreck it.
MIN_SECRET_CHARS = 4
#: The same for values taken from the environment, which the user did not name.
MIN_ENV_SECRET_CHARS = 8

_SECRET_NAME_WORDS = frozenset(
    {"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "AUTH", "CREDENTIAL",
     "CREDENTIALS"}
)  # fmt: skip
_ENV_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]*):([^/\s@]+)@")
#: ``?name=value`` / ``&name=value`` (``;`` too: ``&amp;`` in HTML) in a URL written out.
_QUERY_PARAM = re.compile(r"([?&;])([A-Za-z0-9_.~%-]+)=([^&#\s\"'<>;]*)")
#: Words of a query parameter's name that make its value a secret (the name lowercased and
#: split at ``_``, ``-`` and ``.``: ``api_key``, ``X-Amz-Signature``, ``access_token``).
_SECRET_QUERY_WORDS = frozenset(
    {
        "key", "apikey", "token", "auth", "sig", "signature", "code", "password", "passwd",
        "pwd", "secret", "credential", "credentials", "jwt", "sas",
    }
)  # fmt: skip
_HEADER = re.compile(
    r"(?i)\b((?:proxy-)?authorization|x-api-key|api-key)(\"?'?\s*[:=]\s*\"?'?)"
    r"((?:bearer|basic|token)\s+)?([^\s\"',;}&]+)"
)
#: ``--flag=VALUE`` in free text (``--flag VALUE`` is left to the known secrets: "use
#: --api-key or PREFILLSCOPE_API_KEY" is advice, not a key).
#: Credentials written out with their scheme, wherever they stand ("key provided: Bearer …").
_CREDENTIALS = re.compile(r"\b([Bb]earer|Basic)\s+[A-Za-z0-9._~+/=-]{8,}")
_FLAG_IN_TEXT = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)(=)([^\s\"',;&]+)")

_known: set[str] = set()
#: ``_known``, longest first (a secret containing another is replaced whole).
_known_longest_first: list[str] = []


# -- what is a secret --------------------------------------------------------------------------
def secret_flag(word: str) -> bool:
    """Whether ``word`` (``--api-key``, ``--hf-token``, ``--db-password`` …) takes a secret."""
    if not word.startswith("-"):
        return False
    parts = word.lstrip("-").lower().replace("_", "-").split("-")
    if not parts or not parts[-1]:
        return False
    return parts[-1] in ("key", "token") or any("password" in p or "secret" in p for p in parts)


def secret_env_name(name: str) -> bool:
    """Whether an environment variable called ``name`` holds a secret (``HF_TOKEN``)."""
    words = name.upper().split("_")
    return any(w in _SECRET_NAME_WORDS or "SECRET" in w or "PASSWORD" in w for w in words)


def secret_query_name(name: str) -> bool:
    """Whether a URL query parameter called ``name`` carries a secret (``api_key``,
    ``api-key``, ``apiKey``, ``key``, ``token``, ``access_token``, ``auth``, ``sig``,
    ``signature``, ``code``, ``password``, ``secret``, ``X-Amz-Signature``,
    ``X-Amz-Credential``, ``X-Amz-Security-Token`` …; case does not matter). A count such
    as ``max_tokens`` is not one."""
    words = [w for w in re.split(r"[_.\-]+", name.lower()) if w]
    return any(
        w in _SECRET_QUERY_WORDS or w.endswith(("apikey", "token", "secret", "password"))
        for w in words
    )


def query_secrets(url: str) -> list[str]:
    """The values of a URL's key-like query parameters (``secret_query_name``), as
    written and as decoded (a ``%2F`` in a key is sent as it stands but may be shown decoded)."""
    from urllib.parse import unquote_plus

    query = url.partition("?")[2].partition("#")[0]
    found: list[str] = []
    for match in _QUERY_PARAM.finditer("?" + query):
        _, name, value = match.groups()
        if value and secret_query_name(unquote_plus(name)):
            found += [value, unquote_plus(value)]
    return found


def url_password(text: str) -> str | None:
    """The password in a URL's userinfo, if any."""
    found = _URL_PASSWORD.search(text)
    return found.group(2) if found else None


def secrets_in_argv(argv: Sequence[str]) -> list[str]:
    """The secret values a command line holds: secret flags' values, secret environment
    assignments, URL passwords and key-like query values — also inside a word that is
    itself a command (``--launch "vllm serve M --api-key X"``)."""
    found: list[str] = []
    words = list(argv)
    for i, word in enumerate(words):
        flag, eq, value = word.partition("=")
        if secret_flag(flag):
            if eq:
                found.append(value)
            elif i + 1 < len(words):
                found.append(words[i + 1])
        assignment = _ENV_ASSIGNMENT.match(word)
        if assignment and secret_env_name(assignment.group(1)):
            found.append(assignment.group(2))
        password = url_password(word)
        if password:
            found.append(password)
        if "?" in word:
            found.extend(query_secrets(word))
        if " " in word.strip():
            with contextlib.suppress(ValueError):
                inner = shlex.split(word)
                if len(inner) > 1:
                    found.extend(secrets_in_argv(inner))
    return [s for s in found if s]


# -- what is known -----------------------------------------------------------------------------
def register(*secrets: str | None) -> None:
    """Remember secret values: they are replaced in every text redacted from now on."""
    _known.update(s for s in secrets if s and len(s) >= MIN_SECRET_CHARS and s != MASK)
    _known_longest_first[:] = sorted(_known, key=len, reverse=True)


def register_urls(*urls: str | None) -> None:
    """Remember the passwords of URLs and their key-like query values (the rest of a URL
    is no secret)."""
    for url in urls:
        if url:
            register(url_password(url), *query_secrets(url))


def register_argv(argv: Sequence[str]) -> None:
    """Remember every secret a command line holds (``secrets_in_argv``)."""
    register(*secrets_in_argv(argv))


def register_environment(environ: Mapping[str, str] | None = None) -> None:
    """Remember the values of the environment's secret variables (``secret_env_name``)."""
    environ = os.environ if environ is None else environ
    # Not the short values of a name that merely looks secret (HF_HUB_DISABLE_TOKEN=true):
    # real keys are long, and "true" must not vanish from every output.
    register(
        *(v for k, v in environ.items() if secret_env_name(k) and len(v) >= MIN_ENV_SECRET_CHARS)
    )


# -- redacting ---------------------------------------------------------------------------------
def _flag_value(match: re.Match[str]) -> str:
    flag, sep, value = match.groups()
    return f"{flag}{sep}{MASK}" if secret_flag(flag) and value != MASK else match.group(0)


def _query_value(match: re.Match[str]) -> str:
    from urllib.parse import unquote_plus

    sep, name, value = match.groups()
    if value and value != MASK and secret_query_name(unquote_plus(name)):
        return f"{sep}{name}={MASK}"
    return match.group(0)


def _header_value(match: re.Match[str]) -> str:
    name, sep, scheme, _ = match.groups()
    return f"{name}{sep}{scheme or ''}{MASK}"


def text(value: str, extra: Iterable[str | None] = ()) -> str:
    """``value`` with the known secrets (and ``extra``), URL passwords, header values and
    secret flags' values replaced by ``REDACTED``."""
    secrets = _known_longest_first
    extra = [s for s in extra if s and len(s) >= MIN_SECRET_CHARS]
    if extra:
        secrets = sorted({*secrets, *extra}, key=len, reverse=True)
    for secret in secrets:
        if secret in value:
            value = value.replace(secret, MASK)
    # Each pattern only where its marker is: most strings written (metric names, ids,
    # statuses) have none, and cost a few substring tests.
    if "://" in value:
        value = _URL_PASSWORD.sub(rf"\1:{MASK}@", value)
    if "=" in value and ("?" in value or "&" in value):
        value = _QUERY_PARAM.sub(_query_value, value)
    if "=" in value and "-" in value:
        value = _FLAG_IN_TEXT.sub(_flag_value, value)
    lower = value.lower()
    if "bearer" in lower or "basic" in lower:
        value = _CREDENTIALS.sub(rf"\1 {MASK}", value)
    if "authorization" in lower or "api-key" in lower:
        value = _HEADER.sub(_header_value, value)
    return value


def argv(words: Sequence[str], extra: Iterable[str | None] = ()) -> list[str]:
    """A command line fit to store or print: each secret flag's value and each secret
    environment assignment's value replaced, then every word redacted as ``text``."""
    extra = [*extra, *secrets_in_argv(words)]
    out: list[str] = []
    hide_next = False
    for word in words:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        flag, eq, _ = word.partition("=")
        assignment = _ENV_ASSIGNMENT.match(word)
        if secret_flag(flag):
            out.append(f"{flag}={MASK}" if eq else word)
            hide_next = not eq
        elif assignment and secret_env_name(assignment.group(1)):
            out.append(f"{assignment.group(1)}={MASK}")
        else:
            out.append(text(word, extra))
    return out


def document(value: Any, extra: Iterable[str | None] = ()) -> Any:
    """A JSON-like value (dicts, lists, strings, numbers) with every string redacted."""
    extra = list(extra)
    if isinstance(value, str):
        return text(value, extra)
    if isinstance(value, Mapping):
        return {k: document(v, extra) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [document(v, extra) for v in value]
    return value


def scrub_file(path: str | os.PathLike[str]) -> None:
    """Redact a text file in place (a launched server's log, which it wrote itself)."""
    with contextlib.suppress(OSError):
        with open(path, encoding="utf-8", errors="surrogateescape") as fh:
            content = fh.read()
        clean = text(content)
        if clean != content:
            with open(path, "w", encoding="utf-8", errors="surrogateescape") as fh:
                fh.write(clean)


# -- printing ----------------------------------------------------------------------------------
class RedactingStream:
    """A text stream that redacts what is written to it, and is otherwise the stream."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, value: str) -> int:
        self._stream.write(text(value))
        return len(value)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def guarded_streams() -> Iterator[None]:
    """While inside, ``sys.stdout`` and ``sys.stderr`` redact what is printed."""
    saved = sys.stdout, sys.stderr
    if not isinstance(sys.stdout, RedactingStream):
        sys.stdout = RedactingStream(sys.stdout)  # type: ignore[assignment]
    if not isinstance(sys.stderr, RedactingStream):
        sys.stderr = RedactingStream(sys.stderr)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
