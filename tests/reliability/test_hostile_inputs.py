"""Every case of the hostile-input corpus ends as it must: refused in one clear line naming the
file and line or the setting, or accepted with the right result; never a traceback, a hang, or
a wrong input silently accepted (``reliability_harness`` has the outcomes)."""

from __future__ import annotations

import pytest
from reliability_corpus import CORPUS
from reliability_harness import Workspace, run_case


def test_the_corpus_is_large_and_its_names_unique():
    assert len(CORPUS) >= 150
    assert len({case.name for case in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize("case", CORPUS, ids=[case.name for case in CORPUS])
def test_hostile_input(case, shared_inputs, tmp_path):
    outcome = run_case(case, Workspace(tmp_path, shared_inputs))
    assert outcome.result == case.expect, outcome.detail
