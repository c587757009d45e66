"""Leases: which Console replica does a piece of background work now.

A lease is one ``Lease`` row per job name. ``acquire`` takes it when it is free, expired, or
already this holder's (renewing it), with one conditional UPDATE — or an INSERT for a job
never leased — so two replicas racing for it get one winner on SQLite (one writer) and on
PostgreSQL (the second UPDATE waits for the first's row lock, then finds the lease taken). A
holder that dies leaves the lease to expire; the next replica takes over after ``ttl``. Call
it in the same unit of work as the job's writes: the lease and the work commit together.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import or_, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col

from console.models import Lease

__all__ = ["acquire", "release"]


def acquire(session: Session, name: str, holder: str, *, ttl: float, now: datetime) -> bool:
    """Take or renew the lease ``name`` for ``ttl`` seconds; False while another holds it."""
    until = now + timedelta(seconds=ttl)
    taken = session.execute(
        update(Lease)
        .where(
            col(Lease.name) == name,
            or_(col(Lease.holder) == holder, col(Lease.expires_at) < now),
        )
        .values(holder=holder, expires_at=until, acquired_at=now)
    )
    if taken.rowcount:  # type: ignore[attr-defined]
        return True
    if session.get(Lease, name) is not None:
        return False
    try:
        with session.begin_nested():
            session.add(Lease(name=name, holder=holder, expires_at=until, acquired_at=now))
    except IntegrityError:  # another replica inserted it first
        return False
    return True


def release(session: Session, name: str, holder: str) -> None:
    """Give the lease up (a clean shutdown): another replica takes over at once."""
    lease = session.get(Lease, name)
    if lease is not None and lease.holder == holder:
        session.delete(lease)
