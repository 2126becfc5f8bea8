"""The worker's webhook sender: takes due outbox rows and POSTs them, signed, to their URLs.

It runs beside the claim loop in every worker process, on its own bounded HTTP client and its
own few slots, so a receiver that hangs costs one slot for at most the timeout and never a run
or a run's slot. A delivery is taken under a lease (``next_attempt_at`` pushed past the
timeout): a worker killed mid-request leaves it due again, and the next sender posts it with
the same ``webhook-id``, so the receiver can tell a repeat from a new event.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time

import httpx

from app.api.schemas import EventOut, RunOut
from app.backoff import RetryBackoff
from app.errors import DatabaseUnavailable, RunNotFound
from app.guards.redact import redact
from app.guards.signing import SecretUnreadable, TenantSecrets, signature_headers
from app.guards.ssrf import UrlGuard, UrlRefused
from app.metrics import (
    MAINTENANCE_ERRORS,
    WEBHOOK_DELIVERIES,
    WEBHOOK_LATENCY,
    WEBHOOK_REQUEST_SECONDS,
)
from app.queue import DeliveryJob, Queue
from app.queue.webhooks import Outcome
from app.settings import Settings

log = logging.getLogger(__name__)

USER_AGENT = "runq-webhooks/0.1"
MAX_ERROR_CHARS = 500


class WebhookSender:
    """Sends due deliveries, ``slots`` at a time, until cancelled; :meth:`wake` on NOTIFY."""

    def __init__(
        self,
        queue: Queue,
        *,
        secrets: TenantSecrets,
        guard: UrlGuard,
        timeout_s: float,
        lease_s: float,
        retry: RetryBackoff,
        retry_for_s: float,
        poll_s: float,
        slots: int = 8,
    ) -> None:
        self._queue = queue
        self._secrets = secrets
        self._guard = guard
        self._timeout_s = timeout_s
        # The request's whole timeout plus a lease of margin before another sender may take it.
        self._lease_s = timeout_s + lease_s
        self._retry = retry
        self._retry_for_s = retry_for_s
        self._poll_s = poll_s
        self._slots = slots
        self._wakeup = asyncio.Event()
        self._sending: set[asyncio.Task[None]] = set()

    def wake(self) -> None:
        self._wakeup.set()

    async def run(self) -> None:
        """Never returns; cancelling it abandons the requests in flight to their leases."""
        limits = httpx.Limits(max_connections=self._slots, max_keepalive_connections=self._slots)
        # No redirects (a 3xx is an answer, retried, never followed to an unchecked host) and
        # no proxy from the environment (the checked address is the one connected to).
        async with httpx.AsyncClient(
            timeout=self._timeout_s, follow_redirects=False, limits=limits, trust_env=False
        ) as client:
            try:
                while True:
                    self._wakeup.clear()
                    free = self._slots - len(self._sending)
                    taken = await self._take(client, free) if free > 0 else 0
                    if free > 0 and taken == free:
                        continue  # more may be due
                    # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
                    # cancel, and a worker told to stop then never stops.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self._poll_s):
                            await self._wakeup.wait()
            finally:
                for task in self._sending:
                    task.cancel()
                await asyncio.gather(*self._sending, return_exceptions=True)

    async def _take(self, client: httpx.AsyncClient, free: int) -> int:
        try:
            jobs = await self._queue.claim_deliveries(batch=free, lease_s=self._lease_s)
        except DatabaseUnavailable as exc:
            log.warning("webhook deliveries not claimed: %s", exc)
            return 0
        except Exception:  # the sender goes on: it is every tenant's
            MAINTENANCE_ERRORS.labels(step="webhooks").inc()
            log.exception("webhook deliveries not claimed")
            return 0
        for job in jobs:
            task = asyncio.create_task(self._deliver(client, job))
            self._sending.add(task)
            task.add_done_callback(self._sent)
        return len(jobs)

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._sending.discard(task)
        self._wakeup.set()  # a slot is free
        if not task.cancelled() and task.exception() is not None:
            log.error("webhook delivery failed unexpectedly", exc_info=task.exception())

    async def _deliver(self, client: httpx.AsyncClient, job: DeliveryJob) -> None:
        delivery = job.delivery
        try:
            target = await self._guard.check(delivery.url)  # again: DNS may have changed
            run = await self._queue.get_run(delivery.run_id, tenant_id=None)
            secrets = await self._secrets.signing(delivery.tenant_id)
        except UrlRefused as exc:
            outcome: Outcome = "retry" if exc.code == "webhook_url_unresolvable" else "failed"
            await self._settle(job, outcome, None, f"{exc.code}: {exc.detail}")
            return
        except SecretUnreadable as exc:
            await self._settle(job, "retry", None, str(exc))
            return
        except RunNotFound:
            return  # purged meanwhile: its deliveries went with it
        except DatabaseUnavailable as exc:
            log.warning("webhook delivery %s postponed: %s", delivery.id, exc)
            return  # its lease runs out and it is taken again
        try:
            body = json.dumps(
                {
                    "type": delivery.event_type,
                    "run": RunOut.of(run).model_dump(mode="json"),
                    "event": EventOut.of(job.event).model_dump(mode="json"),
                },
                separators=(",", ":"),
            )
        except Exception as exc:  # a row no body can be made of: failed, visible, not retried forever
            MAINTENANCE_ERRORS.labels(step="webhooks").inc()
            log.exception("webhook delivery %s: no body can be made of its run", delivery.id)
            await self._settle(job, "failed", None, f"no body can be made of the run: {type(exc).__name__}: {exc}")
            return
        headers = signature_headers(secrets_=secrets, msg_id=str(delivery.id), body=body) | {
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            "host": target.url.netloc.decode("ascii"),
        }
        extensions = {"sni_hostname": target.url.host} if target.url.scheme == "https" else {}
        started = time.monotonic()
        try:
            async with asyncio.timeout(self._timeout_s):
                # Streamed and never read: the answer's status is all that counts, and a huge
                # body must not be buffered.
                async with client.stream(
                    "POST", target.pinned_url, content=body, headers=headers, extensions=extensions
                ) as response:
                    code = response.status_code
        except (TimeoutError, httpx.TimeoutException):
            await self._settle(job, "retry", None, f"no answer within {self._timeout_s:g} s", started)
            return
        except httpx.HTTPError as exc:
            await self._settle(job, "retry", None, f"{type(exc).__name__}: {exc}", started)
            return
        if 200 <= code < 300:
            await self._settle(job, "delivered", code, None, started)
        elif code == 410:
            await self._settle(job, "stopped", code, "the receiver answered 410 Gone", started)
        else:
            await self._settle(job, "retry", code, f"the receiver answered {code}", started)

    async def _settle(
        self, job: DeliveryJob, outcome: Outcome, code: int | None, error: str | None, started: float | None = None
    ) -> None:
        if started is not None:
            WEBHOOK_REQUEST_SECONDS.observe(time.monotonic() - started)
        attempt = job.delivery.attempts
        delay = self._retry.delay(attempt) * random.uniform(0.8, 1.0)
        try:
            settled = await self._queue.settle_delivery(
                delivery_id=job.delivery.id,
                attempt=attempt,
                outcome=outcome,
                status_code=code,
                error=redact(error)[:MAX_ERROR_CHARS] if error else None,
                delay_s=delay,
                retry_for_s=self._retry_for_s,
            )
        except DatabaseUnavailable as exc:
            # Not recorded: the lease runs out and the delivery is sent again (at least once).
            log.warning("webhook delivery %s not settled: %s", job.delivery.id, exc)
            return
        if settled is None:
            log.info("webhook delivery %s was taken over by another sender", job.delivery.id)
            return
        WEBHOOK_DELIVERIES.labels(outcome=settled.status if settled.status != "pending" else "retry").inc()
        if settled.delivered_at is not None:
            WEBHOOK_LATENCY.observe((settled.delivered_at - job.event.created_at).total_seconds())
        log.info(
            "webhook delivery %s attempt %d: %s%s",
            job.delivery.id, attempt, settled.status, f" ({error})" if error else "",
        )  # fmt: skip


def sender_from_settings(queue: Queue, settings: Settings, *, guard: UrlGuard | None = None) -> WebhookSender:
    """The sender as configured by ``RUNQ_*``; ``guard`` replaces the one built from the allow
    list (tests inject a resolver)."""
    return WebhookSender(
        queue,
        secrets=TenantSecrets(queue, settings.secret_key or ""),
        guard=guard or UrlGuard(settings.webhook_allow_hosts, hosts_only=settings.webhook_hosts_only),
        timeout_s=settings.webhook_timeout_s,
        lease_s=settings.lease_s,
        retry=RetryBackoff(settings.retry_base_s, settings.retry_max_s),
        retry_for_s=settings.webhook_retry_for_s,
        poll_s=settings.poll_s,
    )
