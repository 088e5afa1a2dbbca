"""One intra-op torch thread for a test module whose model runs beside a server process on the
same cores (two threads each on a shared 2-core host ran many times slower). Import the fixture
into the module or conftest that needs it: ``from tests.torch_threads import one_torch_thread``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
