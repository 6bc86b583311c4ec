"""`feedback=expert`: a reviewer model reads the team's joint answer and proposes edits.

The reviewer is either an OpenAI-compatible chat endpoint (`feedback.url`, `feedback.model`, the key
read from the environment variable named by `feedback.api_key_env`; stdlib urllib, one request per
node, `max_workers` in flight, `timeout_s` each, `retries` more attempts) or a local causal LM
(`feedback.local_model`: a directory, a hub id or `builtin:NAME`), which reviews every node of a
turn in one greedy generate call.

A reviewer that is down, slow or answers something that is not a chat completion never stops the
run: that item gets `plain` feedback, the failure is counted (train/feedback/degraded), and one
warning per batch names the first cause.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from magrpo.config.groups import FeedbackConfig
from magrpo.core.schema import ConfigError, at_least, option, positive
from magrpo.models import hub
from magrpo.rollout.feedback import NodeView, PlainFeedback, register_feedback

log = logging.getLogger(__name__)

SYSTEM = ("You review the work of a team of AI agents who each wrote one part of a joint answer. Point out "
          "concrete mistakes and propose specific edits for each agent's part. Be brief; do not write the "
          "whole answer yourself.")


@dataclass
class ExpertConfig(FeedbackConfig):
    mode: str = "expert"
    url: str | None = option(None, help="OpenAI-compatible base URL (…/v1) or its /chat/completions")
    model: str = option("gpt-4o-mini", help="the endpoint's model name")
    api_key_env: str | None = option("OPENAI_API_KEY",
                                     help="environment variable holding the key (never the key)")
    timeout_s: float = positive(30.0, help="seconds one request may take")
    retries: int = at_least(0, 2, help="more attempts after a failed request")
    retry_backoff_s: float = at_least(0, 1.0, help="wait before retry k: backoff * 2^(k-1)")
    max_workers: int = at_least(1, 8, help="requests in flight")
    local_model: str | None = option(None, help="instead of a URL: a local reviewer (builtin:tiny for tests)")
    max_new_tokens: int = at_least(1, 256, help="the reviewer's token cap per review")
    temperature: float = option(0.0, check=lambda v: v >= 0, allowed=">= 0",
                                help="the endpoint's sampling temperature (a local reviewer is greedy)")

    @staticmethod
    def check_node(node: Any, prefix: str) -> None:
        if (node.url is None) == (node.local_model is None):
            raise ConfigError(f"{prefix}url={node.url!r} and {prefix}local_model={node.local_model!r}: "
                              f"set exactly one (an OpenAI-compatible endpoint, or a local model path)")


def review_request(view: NodeView) -> str:
    """The reviewer's user message: every agent's task and answer."""
    parts = [f"Agent {i + 1}'s task:\n{p.strip()}\n\nAgent {i + 1}'s answer:\n{a.strip()}"
             for i, (p, a) in enumerate(zip(view.prompts, view.answers))]
    return "\n\n---\n\n".join(parts) + "\n\n---\n\nPropose concrete edits for each agent's part."


class ReviewError(RuntimeError):
    """The reviewer gave no usable review for one item."""


def chat_endpoint(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/chat/completions") else url + "/chat/completions"


def post_review(url: str, model: str, key: str | None, text: str, cfg: ExpertConfig) -> str:
    """One chat completion with retries; raises ReviewError with the last cause."""
    body = json.dumps({"model": model, "temperature": cfg.temperature, "max_tokens": cfg.max_new_tokens,
                       "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]})
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    last = "no attempt"
    for attempt in range(cfg.retries + 1):
        if attempt:
            time.sleep(cfg.retry_backoff_s * 2 ** (attempt - 1))
        req = urllib.request.Request(chat_endpoint(url), data=body.encode("utf-8"), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=cfg.timeout_s) as resp:
                payload = json.loads(resp.read().decode("utf-8"))
            content = payload["choices"][0]["message"]["content"]
            if not isinstance(content, str) or not content.strip():
                raise ValueError("empty review")
            return content.strip()
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code}"
        except (urllib.error.URLError, TimeoutError, OSError) as e:
            last = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
        except (ValueError, KeyError, IndexError, TypeError) as e:   # not JSON, or not a chat completion
            last = f"malformed reply ({type(e).__name__}: {e})"
    raise ReviewError(last)


@functools.lru_cache(maxsize=2)
def load_reviewer(path: str):
    """A local reviewer model and tokenizer, loaded once per process."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415  start-up: transformers loads only where a model does

    from magrpo.models.agents import resolve_model_path  # noqa: PLC0415  start-up: torch loads only where a model does; the tasks and feedback modes load without it

    where = resolve_model_path(path)
    tok = AutoTokenizer.from_pretrained(where)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    with hub.quiet_bars("transformers"):
        model = AutoModelForCausalLM.from_pretrained(where).eval()
    return model, tok


def local_reviews(path: str, texts: list[str], cfg: ExpertConfig) -> list[str]:
    """Greedy reviews of every text in ONE batched generate call."""
    import torch  # noqa: PLC0415  start-up: torch loads only where a model does; the tasks and feedback modes load without it

    model, tok = load_reviewer(path)
    prompts = [tok.apply_chat_template([{"role": "system", "content": SYSTEM}, {"role": "user", "content": t}],
                                       tokenize=False, add_generation_prompt=True)
               if getattr(tok, "chat_template", None) else f"{SYSTEM}\n\n{t}\n\nReview:" for t in texts]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=cfg.max_new_tokens, do_sample=False,
                             pad_token_id=tok.pad_token_id)
    return [t.strip() for t in tok.batch_decode(out[:, enc.input_ids.shape[1]:], skip_special_tokens=True)]


@register_feedback("expert")
class ExpertFeedback(PlainFeedback):
    config_schema = ExpertConfig
    cfg: ExpertConfig                   # its config_schema's instance (Feedback.__init__)

    def __call__(self, views: list[NodeView]) -> list[list[str]]:
        reviews, causes = self.reviews([review_request(v) for v in views])
        out = []
        for v, review in zip(views, reviews):
            if review is None:
                out.append([PlainFeedback.message(self, v, i) for i in range(len(v.answers))])
            else:
                out.append([f"A reviewer read the team's answers and suggests:\n{review}\n\n{self.instruction(v, i)}"
                            for i in range(len(v.answers))])
        if causes:
            self.degraded += len(causes)
            log.warning("expert feedback failed for %d of %d item(s) (first: %s); they get plain feedback",
                        len(causes), len(views), causes[0])
        return out

    def reviews(self, texts: list[str]) -> tuple[list[str | None], list[str]]:
        """A review per text (None where the reviewer failed) and the failures' causes."""
        cfg = self.cfg
        if not texts:
            return [], []
        if cfg.local_model:
            try:
                got = local_reviews(cfg.local_model, texts, cfg)
            except Exception as e:   # a broken local reviewer degrades like a dead endpoint
                return [None] * len(texts), [f"{type(e).__name__}: {e}"] * len(texts)
            return ([g or None for g in got], ["empty review"] * sum(not g for g in got))
        url = cfg.url
        if url is None:
            raise ConfigError("feedback.url and feedback.local_model are both null: set exactly one (an "
                              "OpenAI-compatible endpoint, or a local model path)")
        key = os.environ.get(cfg.api_key_env) if cfg.api_key_env else None

        def one(text: str) -> str | Exception:
            try:
                return post_review(url, cfg.model, key, text, cfg)
            except ReviewError as e:
                return e

        with ThreadPoolExecutor(max_workers=min(cfg.max_workers, len(texts))) as pool:
            results = list(pool.map(one, texts))
        return ([r if isinstance(r, str) else None for r in results],
                [str(r) for r in results if not isinstance(r, str)])
