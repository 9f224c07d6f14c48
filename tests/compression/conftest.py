"""One torch thread per test here (the machine is shared); restored afterwards."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_torch_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
