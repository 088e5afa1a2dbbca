"""Rate limiters and the run-wide budget.

:class:`AsyncTokenBucket` refills at a constant rate up to a capacity. ``acquire(n)`` waits until the
level covers ``min(n, capacity)``, then takes ``n``: a request larger than the bucket is let through
when the bucket is full and leaves it in debt, so the long-run rate still holds. Waiters are served
in arrival order. ``adjust(delta)`` reconciles an estimate with the real usage afterwards.

:class:`Budget` is shared by every endpoint of a run. A call reserves its worst case (estimated
prompt + max_tokens, and that in USD) *before* it is sent; if spent + reserved + this call would pass
the limit, :class:`~coa.llm.errors.BudgetExhausted` is raised and nothing is sent. When the call
ends the reservation is replaced by the real usage (or released if it failed). Thread-safe.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

from coa.llm.errors import BudgetExhausted


class AsyncTokenBucket:
    """An asyncio token bucket: ``rate_per_s`` refill, ``capacity`` burst, FIFO waiters."""

    def __init__(
        self, rate_per_s: float, capacity: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate_per_s <= 0 or capacity <= 0:
            raise ValueError("rate_per_s and capacity must be > 0")
        self.rate = rate_per_s
        self.capacity = capacity
        self._clock = clock
        self._level = capacity
        self._updated = clock()
        self._lock = asyncio.Lock()

    @classmethod
    def per_minute(cls, per_minute: float, burst_s: float = 0.0) -> AsyncTokenBucket:
        """A bucket for a per-minute limit holding ``burst_s`` seconds' worth (at least 1)."""
        rate = per_minute / 60.0
        return cls(rate, max(1.0, rate * burst_s))

    def _refill(self) -> None:
        now = self._clock()
        self._level = min(self.capacity, self._level + (now - self._updated) * self.rate)
        self._updated = now

    @property
    def level(self) -> float:
        self._refill()
        return self._level

    async def acquire(self, amount: float = 1.0) -> float:
        """Take ``amount`` tokens, waiting as needed; returns the seconds waited."""
        start = self._clock()
        async with self._lock:
            while True:
                self._refill()
                need = min(amount, self.capacity)
                if self._level >= need:
                    self._level -= amount
                    return self._clock() - start
                await asyncio.sleep((need - self._level) / self.rate)

    def adjust(self, delta: float) -> None:
        """Take ``delta`` more tokens (or give back ``-delta``), e.g. actual minus estimated usage."""
        self._refill()
        self._level = min(self.capacity, self._level - delta)


@dataclasses.dataclass(frozen=True)
class Reservation:
    """A budget hold for one call in flight."""

    tokens: int
    usd: float


class Budget:
    """Run-wide token and/or USD budget (None = unlimited), shared by all endpoints."""

    def __init__(self, max_tokens: int | None = None, max_usd: float | None = None) -> None:
        self.max_tokens = max_tokens
        self.max_usd = max_usd
        self._lock = threading.Lock()
        self.spent_tokens = 0
        self.spent_usd = 0.0
        self.reserved_tokens = 0
        self.reserved_usd = 0.0
        self.calls = 0

    def reserve(self, tokens: int, usd: float = 0.0, what: str = "the next call") -> Reservation:
        """Hold ``tokens``/``usd`` for a call, or raise BudgetExhausted if that could pass a limit."""
        with self._lock:
            if self.max_tokens is not None:
                committed = self.spent_tokens + self.reserved_tokens
                if committed + tokens > self.max_tokens:
                    raise BudgetExhausted(
                        f"LLM token budget exhausted: {what} may use up to {tokens} tokens, but "
                        f"budget_tokens={self.max_tokens} with {self.spent_tokens} spent and "
                        f"{self.reserved_tokens} reserved by calls in flight; nothing was sent"
                    )
            if self.max_usd is not None:
                committed_usd = self.spent_usd + self.reserved_usd
                if committed_usd + usd > self.max_usd:
                    raise BudgetExhausted(
                        f"LLM USD budget exhausted: {what} may cost up to ${usd:.6f}, but "
                        f"budget_usd={self.max_usd} with ${self.spent_usd:.6f} spent and "
                        f"${self.reserved_usd:.6f} reserved by calls in flight; nothing was sent"
                    )
            self.reserved_tokens += tokens
            self.reserved_usd += usd
            return Reservation(tokens, usd)

    def settle(self, reservation: Reservation, tokens: int, usd: float = 0.0) -> None:
        """Replace a reservation by what the call really used."""
        with self._lock:
            self.reserved_tokens -= reservation.tokens
            self.reserved_usd -= reservation.usd
            self.spent_tokens += tokens
            self.spent_usd += usd
            self.calls += 1

    def release(self, reservation: Reservation) -> None:
        """Drop a reservation (the call failed before using anything we can account for)."""
        with self._lock:
            self.reserved_tokens -= reservation.tokens
            self.reserved_usd -= reservation.usd

    def summary(self) -> dict[str, Any]:
        """Spent and remaining amounts (for logs and run reports)."""
        with self._lock:
            return {
                "calls": self.calls,
                "spent_tokens": self.spent_tokens,
                "spent_usd": round(self.spent_usd, 6),
                "budget_tokens": self.max_tokens,
                "budget_usd": self.max_usd,
                "remaining_tokens": None if self.max_tokens is None else self.max_tokens - self.spent_tokens,
                "remaining_usd": None if self.max_usd is None else round(self.max_usd - self.spent_usd, 6),
            }
