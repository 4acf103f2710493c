"""The reliability corpus's shared inputs: a tiny data file, a finished run on it and the same
run interrupted after its first epoch, made once per test process."""

from __future__ import annotations

import pytest
import torch
from reliability_harness import SharedInputs, make_shared_inputs


@pytest.fixture(scope="session")
def shared_inputs(tmp_path_factory) -> SharedInputs:
    torch.set_num_threads(1)
    return make_shared_inputs(tmp_path_factory.mktemp("shared"))
