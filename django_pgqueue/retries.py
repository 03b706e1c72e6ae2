"""When a failed attempt runs again: one :class:`RetryStrategy`, one rule for the last attempt.

The worker (a job that raised or timed out), the ``django.tasks`` backend (which tells Django's
signals whether a retry follows) and the claim's stale-job path (``sql.claim``: a job whose
worker died on its last attempt goes dead) all decide with :func:`is_final_attempt`; delays come
from a job's :class:`RetryStrategy`, built from its :class:`~django_pgqueue.spec.JobSpec`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# Past this many doublings every delay is at its cap (and 2.0 ** n stays a finite float).
_MAX_DOUBLINGS = 64


def is_final_attempt(attempts: int, max_attempts: int) -> bool:
    """Whether attempt number ``attempts`` (1-based, the one just made) was the last allowed.

    ``sql.claim`` applies the same rule in SQL (``attempts >= max_attempts``).
    """
    return attempts >= max_attempts


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """What becomes of a failed attempt: retried after ``delay`` seconds, or final."""

    final: bool
    delay: float = 0.0


@dataclass(frozen=True, slots=True)
class RetryStrategy:
    """Exponential backoff: ``base * 2 ** (attempt - 1) * (1 + U(0, jitter))``, at most ``cap``.

    The values are validated where they come from (``JobSpec`` and the system checks), so every
    delay is a finite number of seconds between 0 and ``cap``.
    """

    base: float
    cap: float
    jitter: float

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        doublings = min(max(attempt - 1, 0), _MAX_DOUBLINGS)
        delay = self.base * 2.0**doublings
        if self.jitter:
            delay *= 1 + random.uniform(0, self.jitter)
        return min(delay, self.cap)

    def decide(self, attempts: int, max_attempts: int, *, retryable: bool = True) -> RetryDecision:
        """The fate of failed attempt ``attempts`` of ``max_attempts``.

        ``retryable=False`` is for failures no retry can fix (a value that cannot be stored).
        """
        if not retryable or is_final_attempt(attempts, max_attempts):
            return RetryDecision(final=True)
        return RetryDecision(final=False, delay=self.delay(attempts))
