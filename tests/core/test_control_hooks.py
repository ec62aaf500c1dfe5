"""The adaptive coefficient's state is today's layout only (no reader of older files)."""

from __future__ import annotations

import pytest

from eapo.core.controls import AdaptiveEntropyCoef


def test_a_state_without_one_of_its_keys_is_refused_naming_the_key_and_the_file():
    coef = AdaptiveEntropyCoef(target=1.0)
    coef.update(0.5)
    for key in ("coef", "target", "last_entropy"):
        state = {k: v for k, v in coef.state_dict().items() if k != key}
        with pytest.raises(
            ValueError, match=rf"controls\.adaptive_entropy\.{key} of the checkpoint's eapo_state\.json"
        ):
            AdaptiveEntropyCoef(target=1.0).load_state_dict(state)
    restored = AdaptiveEntropyCoef(target=1.0)
    restored.load_state_dict(coef.state_dict())
    assert (restored.coef, restored.last_entropy) == (0.005, 0.5)
