"""``runq dev``'s admin key (app/cli/dev_key.py): kept in the data folder (0600) and reused while
the database knows it, replaced when it was revoked; only its digest is stored."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from app.api.keys import hash_key, revoke_key
from app.cli.dev_key import DEV_KEY_FILE, dev_key
from app.db.engine import create_engine


async def test_the_dev_key_is_kept_and_reused_until_revoked(database_url: str, tmp_path: Path) -> None:
    first, reused = await dev_key(database_url, tmp_path)
    assert not reused and first.startswith("rq_")
    kept = tmp_path / DEV_KEY_FILE
    assert kept.stat().st_mode & 0o777 == 0o600 and kept.read_text().strip() == first
    assert await dev_key(database_url, tmp_path) == (first, True)

    await revoke_key(database_url, first[:10])
    second, reused = await dev_key(database_url, tmp_path)
    assert not reused and second != first and kept.read_text().strip() == second

    engine = create_engine(database_url, pool_size=1)
    try:
        async with engine.connect() as conn:
            stored = (await conn.execute(text("SELECT key_hash FROM api_keys WHERE tenant_id = 'dev'"))).scalars().all()
    finally:
        await engine.dispose()
    assert hash_key(second) in stored and second not in stored
