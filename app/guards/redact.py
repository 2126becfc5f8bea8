"""The one secret redactor: everything a run stores (event data, tool output, error messages)
passes through it first, so a leaked key never reaches the database, a stream or a log.

Patterns are deliberately specific (known key formats, ``name=value`` pairs whose name says
secret): a redactor that eats ordinary text makes tool output useless to the model.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from typing import Any

MASK = "[REDACTED]"

# Names whose values are secrets, as a key in data or the left side of ``name=value``.
_SECRET_NAME = (
    r"[A-Za-z0-9_.-]*?(?:password|passwd|passphrase|secret|token|api[_-]?key|access[_-]?key"
    r"|private[_-]?key|account[_-]?key|client[_-]?secret|credentials?)"
)
_SECRET_KEY = re.compile(rf"^{_SECRET_NAME}$", re.IGNORECASE)
# What every match of _SECRET_NAME contains, lowercase.
_SECRET_WORDS = (
    *("password", "passwd", "passphrase", "secret", "token", "credential"),
    *(f"{name}{sep}key" for name in ("api", "access", "private", "account") for sep in ("", "_", "-")),
)

# Every rule with the lowercase strings one of which any of its matches contains: a rule runs
# only on ASCII text that has one (a model's text seldom does, and fourteen scans of every delta
# and every message cost more than the rest of a streaming run's event writes).
_RULES: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str], tuple[str, ...]]] = [
    (
        re.compile(
            r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?(?:-----END \1PRIVATE KEY-----|\Z)",
            re.DOTALL,
        ),
        "[REDACTED PRIVATE KEY]",
        ("-----begin",),
    ),
    # user:password@ in any scheme's URL; the user stays, it helps debugging.
    (re.compile(r"\b([a-z][a-z0-9+.-]*://[^\s:/@]*):[^\s/@]+@", re.IGNORECASE), rf"\1:{MASK}@", ("://",)),
    # The whole credential of an Authorization header, whatever its scheme.
    (
        re.compile(
            r"(\bauthorization[\"']?\s*[:=]\s*[\"']?(?:[A-Za-z]+\s+)?)[^\s\"',;]+", re.IGNORECASE
        ),
        rf"\1{MASK}",
        ("authorization",),
    ),
    (re.compile(r"(\bbearer\s+)[A-Za-z0-9._~+/-]{12,}=*", re.IGNORECASE), rf"\1{MASK}", ("bearer",)),
    (re.compile(r"\brq_[A-Za-z0-9_-]{20,}"), MASK, ("rq_",)),  # runq's own API keys
    (re.compile(r"\bsk-ant-[A-Za-z0-9_-]{8,}"), MASK, ("sk-ant-",)),
    (re.compile(r"\bsk-(?:proj-|live-|test-)?[A-Za-z0-9_-]{16,}"), MASK, ("sk-",)),
    (
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
        MASK,
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), MASK, ("xox",)),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), MASK, ("aiza",)),
    (re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b"), MASK, ("akia", "asia", "agpa", "aida", "aroa")),
    # Stripe secret and restricted keys, Hugging Face, GitLab, Groq, xAI, npm, SendGrid.
    (
        re.compile(
            r"\b(?:[sr]k_(?:live|test)_[A-Za-z0-9]{16,}|hf_[A-Za-z0-9]{30,}|glpat-[A-Za-z0-9_-]{20,}"
            r"|gsk_[A-Za-z0-9]{40,}|xai-[A-Za-z0-9]{40,}|npm_[A-Za-z0-9]{36}"
            r"|SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,})"
        ),
        MASK,
        ("k_live_", "k_test_", "hf_", "glpat-", "gsk_", "xai-", "npm_", "sg."),
    ),
    # A JSON Web Token is a bearer credential wherever it appears, header or not.
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), MASK, ("eyj",)),
    # name=value, name: value and "name": "value" where the name says secret; this is also
    # what catches AWS secret keys, which have no prefix of their own.
    (
        re.compile(
            rf"(\b{_SECRET_NAME}[\"']?\s*[=:]\s*)(?:(\")[^\"\n]*\"|(')[^'\n]*'|[^\s\"',;&]+)",
            re.IGNORECASE,
        ),
        lambda m: f"{m[1]}{m[2] or m[3] or ''}{MASK}{m[2] or m[3] or ''}",
        _SECRET_WORDS,
    ),
]
# Any rule's trigger in one scan, for text as short as a streamed delta (most hold none, and then
# no rule is looked at). On longer text re tries each trigger at every position, and the rules'
# own substring checks cost less: about 100 characters is where the two cross.
_ANY_TRIGGER = re.compile("|".join(re.escape(t) for _, _, triggers in _RULES for t in triggers))
_SHORT = 100


class Redactor:
    """Masks secrets in text and in JSON-like data; shortens paths under the given roots."""

    def __init__(self, roots: Iterable[str] = ()) -> None:
        # Longest root first, so a nested root wins over its parent.
        cleaned = sorted({r.rstrip("/") for r in roots if r.strip("/")}, key=len, reverse=True)
        self._roots = (
            re.compile("|".join(rf"{re.escape(r)}(?![\w.-])" for r in cleaned)) if cleaned else None
        )

    def text(self, value: str) -> str:
        # Outside ASCII, IGNORECASE matches more than lower() finds (U+017F matches "s"): all rules run.
        lowered = value.lower() if value.isascii() else None
        if lowered is None or len(lowered) > _SHORT or _ANY_TRIGGER.search(lowered):
            for pattern, replacement, triggers in _RULES:
                if lowered is None or any(t in lowered for t in triggers):
                    value = pattern.sub(replacement, value)
        if self._roots is not None:
            value = self._roots.sub("…", value)
        return value

    def data(self, value: Any) -> Any:
        """A copy of ``value`` with every string redacted, and values under secret keys masked."""
        if isinstance(value, str):
            return self.text(value)
        if value is None or isinstance(value, int | float):  # most leaves: no ABC check
            return value
        if isinstance(value, Mapping):
            return {
                key: MASK
                if isinstance(item, str) and item and isinstance(key, str) and _secret_key(key)
                else self.data(item)
                for key, item in value.items()
            }
        if isinstance(value, list | tuple):
            return [self.data(item) for item in value]
        return value


@lru_cache(maxsize=4096)
def _secret_key(key: str) -> bool:
    """Whether a key's value is masked: the same few keys come back in every event, and the
    pattern costs a microsecond a key."""
    return _SECRET_KEY.match(key) is not None


@lru_cache
def default_redactor() -> Redactor:
    """The process-wide redactor, with the roots from ``RUNQ_REDACT_ROOTS``."""
    from app.settings import get_settings

    return Redactor(get_settings().redact_roots)


def redact(value: str) -> str:
    return default_redactor().text(value)


def redact_data(value: Any) -> Any:
    return default_redactor().data(value)
