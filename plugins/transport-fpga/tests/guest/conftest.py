"""Guest tests of the FPGA controller: the engine model's ERNIC part needs a verbs device.

They skip without one (fail under BACKLINE_REQUIRE_RDMA=1); CI runs them in the Soft-RoCE guest.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from backline_transport_fpga.model import EngineModel
from backline_transport_rdma.testing import require_device


@pytest.fixture(scope="session")
def rdma_device() -> str:
    return require_device("plugins/transport-fpga/tests/guest")


@pytest.fixture
def engine(rdma_device: str, tmp_path) -> Iterator[EngineModel]:
    """An engine model on the guest's device, with a window of this test's; stopped and removed after."""
    with EngineModel(str(tmp_path / "hwhs"), device=rdma_device) as model:
        yield model
