"""The code mutator's connection to an OpenAI-compatible chat endpoint (`FITTEST_LLM_URL`).

`code_mutator` is the `fittest.mutators` entry point of the code mutator: it returns None (the
mutator is off) when no URL is configured. The endpoint is any server that speaks the OpenAI chat
completions API (OpenAI, vLLM, llama.cpp's server, Ollama's /v1); `FITTEST_LLM_URL` is its base
(`http://host:8000/v1`) or the full `/chat/completions` URL. The key, when needed, comes from the
environment (`FITTEST_LLM_API_KEY`) and is sent as a bearer token, never logged.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from evolution.mutation import MutatorConfig
from evolution.mutators.code import CodeMutator

COMPLETIONS = "/chat/completions"
ATTEMPTS = 3


class ChatError(RuntimeError):
    """The endpoint answered, but not with a chat completion."""


class BudgetSpent(TimeoutError):
    """The evolution has no time left for another request (not retried)."""


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, httpx.TransportError):
        return True
    return isinstance(exc, httpx.HTTPStatusError) and (exc.response.status_code == 429 or exc.response.status_code >= 500)


class ChatClient:
    """One chat completion per call, retried with jittered backoff on connection errors, 429 and 5xx."""

    def __init__(self, url: str, model: str, api_key: str | None = None, timeout_s: float = 60.0) -> None:
        base = url.rstrip("/")
        self.url = base if base.endswith(COMPLETIONS) else base + COMPLETIONS
        self.model = model
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.timeout_s = timeout_s

    def _post(self, body: dict[str, Any], deadline: float | None) -> dict[str, Any]:
        timeout = self.timeout_s
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BudgetSpent("the evolution's budget (FITTEST_EVOLUTION_BUDGET_S) was spent waiting for the model")
            timeout = min(timeout, left)
        with httpx.Client(timeout=timeout, follow_redirects=False) as client:
            response = client.post(self.url, json=body, headers=self.headers)
        response.raise_for_status()
        return response.json()

    def complete(self, messages: list[dict[str, str]], deadline: float | None = None) -> str:
        """The model's reply; each request waits at most FITTEST_LLM_TIMEOUT_S and, with a
        `deadline` (time.monotonic()), no request waits past it nor starts after it."""
        body = {"model": self.model, "messages": messages, "temperature": 0.2}
        retrying = Retrying(
            retry=retry_if_exception(_transient),
            stop=stop_after_attempt(ATTEMPTS),
            wait=wait_random_exponential(multiplier=0.5, max=5.0),
            reraise=True,
        )
        data = retrying(self._post, body, deadline)
        try:
            content = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise ChatError(f"{self.url} answered without choices[0].message.content") from exc
        if not isinstance(content, str):
            raise ChatError(f"{self.url} answered with non-text content")
        return content


def code_mutator(config: MutatorConfig) -> CodeMutator | None:
    """Entry point of the code mutator; off without FITTEST_LLM_URL."""
    if not config.llm_url:
        return None
    key = config.llm_api_key.get_secret_value() if config.llm_api_key else None
    client = ChatClient(config.llm_url, config.llm_model, key, config.llm_timeout_s)
    return CodeMutator(client.complete, config.llm_model)
