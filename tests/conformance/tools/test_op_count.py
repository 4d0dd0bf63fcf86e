"""conformance.tools.op_count.count_ops: counts Tensor.tolist as an op and puts torch back as it was."""

import torch

from conformance.tools.op_count import count_ops


def test_tolist_is_counted_and_torch_is_left_as_it_was() -> None:
    inherited = "tolist" not in vars(torch.Tensor)
    before = torch.Tensor.tolist
    counter = count_ops(lambda: torch.arange(3).tolist())
    assert counter.ops["tolist"] == 1
    # an inherited method stays inherited (a later wrapper that restores by deleting finds it there)
    assert ("tolist" not in vars(torch.Tensor)) == inherited
    assert torch.Tensor.tolist is before
