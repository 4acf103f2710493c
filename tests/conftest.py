"""Shared fixtures: where the staged real datasets are, and a skip when they are absent."""

import os
from pathlib import Path

import pytest
from hypothesis import settings

REPO_ROOT = Path(__file__).resolve().parents[1]

# Wall-clock deadlines make property tests flaky on 2 shared cores; correctness, not speed, is
# what they check (speed claims live in benchmarks/).
settings.register_profile("attnsvm", deadline=None)
settings.load_profile("attnsvm")


def shared_data_dir() -> Path | None:
    """``$ATTNSVM_SHARED_DATA`` or ``<repo>/../shared/data``; None where neither exists."""
    env = os.environ.get("ATTNSVM_SHARED_DATA")
    candidate = Path(env) if env else REPO_ROOT.parent / "shared" / "data"
    return candidate if candidate.is_dir() else None


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_data_dir()
    if path is None:
        pytest.skip("../shared/data is absent (set ATTNSVM_SHARED_DATA to point at it)")
    return path
