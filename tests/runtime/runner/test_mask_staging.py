"""MaskStaging on the CPU: the arrays it hands out are what `upload` gives the sampler, step after step."""

from __future__ import annotations

import numpy as np
import torch

from model_optimizer.runtime.runner.mask_staging import MaskStaging
from model_optimizer.runtime.structured.manager import HostTokenMask


def _fill(mask: HostTokenMask, seed: int) -> None:
    rng = np.random.default_rng(seed)
    mask.mask_index[:] = rng.integers(-1, mask.bitmask.shape[0], size=mask.mask_index.shape)
    mask.bitmask[:] = rng.integers(-(2**31), 2**31, size=mask.bitmask.shape, dtype=np.int64).astype(np.int32)


def test_each_step_uploads_what_was_written_whether_the_shape_stays_or_changes():
    staging = MaskStaging(torch.device("cpu"))
    shapes = [(4, 3, 5), (4, 3, 5), (4, 3, 5), (6, 2, 5), (6, 2, 5), (3, 3, 9)]  # kept, then changed, then grown
    handed = []
    for step, shape in enumerate(shapes):
        mask = staging.buffers(*shape)
        assert mask.mask_index.shape == shape[:1] and mask.bitmask.shape == shape[1:]
        _fill(mask, step)
        expected = (mask.mask_index.copy(), mask.bitmask.copy())
        device = staging.upload(mask)
        assert np.array_equal(device.mask_index.numpy(), expected[0])
        assert np.array_equal(device.bitmask.numpy(), expected[1])
        handed.append(mask)
    assert handed[2] is handed[0] and handed[1] is not handed[0]  # two buffers alternate; a kept shape reuses
    assert handed[3] is not handed[1]


def test_arrays_of_its_own_are_copied_as_they_are():
    staging = MaskStaging(torch.device("cpu"))
    staging.buffers(2, 1, 3)  # handed out, but the caller uploads other arrays
    own = HostTokenMask(np.array([0, -1], dtype=np.int32), np.array([[1, 2, 3]], dtype=np.int32))
    device = staging.upload(own)
    assert device.mask_index.tolist() == [0, -1] and device.bitmask.tolist() == [[1, 2, 3]]


def test_up_to_max_rows_the_bitmask_starts_at_one_offset_and_stale_index_entries_stay_below_max_rows():
    """The fixed layout the decode graphs' masked draw reads: whatever a step's rows (up to max_rows), the
    bitmask follows an index of max_rows entries. Entries past a step's rows, which a padded row of its
    bucket reads, hold -1 or an earlier step's index below max_rows, also after a step wider than max_rows
    (whose indices reach past it) used the same buffer."""
    staging = MaskStaging(torch.device("cpu"), max_rows=8)
    offsets = set()
    for step, shape in enumerate([(8, 8, 5), (8, 8, 5), (12, 12, 5), (12, 12, 5), (3, 2, 5), (3, 2, 5), (5, 4, 5)]):
        mask = staging.buffers(*shape)
        if shape[0] <= 8:
            offsets.add(mask.bitmask.ctypes.data - mask.mask_index.ctypes.data)
            index = staging._host[staging._parity][: 8 * 4].view(torch.int32)
            assert bool(((index >= -1) & (index < 8)).all())
        _fill(mask, step)
        mask.mask_index[0] = shape[1] - 1  # the largest index a step of this shape may write
        staging.upload(mask)
    assert offsets == {32}
    assert staging.fixed(8) is None  # on the CPU the host buffers alternate: no fixed addresses
    wide = staging.buffers(9, 1, 5)  # more rows than the fixed layout holds: laid out for its own shape
    assert wide.bitmask.ctypes.data - wide.mask_index.ctypes.data == 48
