"""Helpers for the workload tests: a real BPE tokenizer and a real ``/tokenize`` server.

The tokenizer is trained here, from text that exists on every machine (the Python
standard library), in the shape of the vLLM CPU target's (byte-level BPE, ``<s>``
prepended), so text prompts are tested against a genuine subword tokenizer rather than
a stand-in. The server answers ``POST /tokenize`` in vLLM's shape over real loopback.
"""

from __future__ import annotations

import asyncio
import sysconfig
import threading
from pathlib import Path

import tokenizers
from aiohttp import web
from tokenizers import decoders, models, pre_tokenizers, processors, trainers

SPECIALS = ["<unk>", "<s>", "</s>"]


def train_tokenizer(out: Path, vocab_size: int = 2000) -> Path:
    """A byte-level BPE ``tokenizer.json`` trained on some stdlib modules; returns its path."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    corpus = [p.read_text(encoding="utf-8") for p in sorted(stdlib.glob("[a-e]*.py"))[:40]]
    tok = tokenizers.Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", bos)]
    )
    path = out / "tokenizer.json"
    tok.save(str(path))
    return path


class TokenizeServer:
    """``POST /tokenize`` backed by a ``tokenizer.json``, on 127.0.0.1 and a free port."""

    def __init__(self, tokenizer_path: Path) -> None:
        self._tok = tokenizers.Tokenizer.from_file(str(tokenizer_path))
        self.calls = 0
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def _tokenize(self, request: web.Request) -> web.Response:
        self.calls += 1
        body = await request.json()
        ids = self._tok.encode(
            body["prompt"], add_special_tokens=body.get("add_special_tokens", True)
        ).ids
        return web.json_response(
            {"count": len(ids), "max_model_len": 4096, "tokens": ids, "token_strs": None}
        )

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/tokenize", self._tokenize)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        self._ready.set()
        self._loop.run_forever()

    def __enter__(self) -> TokenizeServer:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()
