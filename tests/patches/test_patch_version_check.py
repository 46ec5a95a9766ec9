"""patches._dgl_version: which DGL versions a patch accepts, and what it says otherwise."""
import pytest

from patches._dgl_version import UnsupportedDGLVersion, check


@pytest.mark.parametrize("found", ["2.1.0", "2.1.1", "2.1.0+cu121", "2.1"])
def test_the_2_1_series_is_accepted(found):
    check("patches.example", found)


@pytest.mark.parametrize("found", ["2.2.0", "2.0.0", "2.10.0", "3.1.0", "1.1.0"])
def test_other_versions_are_refused_naming_patch_found_and_expected(found):
    with pytest.raises(UnsupportedDGLVersion) as err:
        check("patches.example", found)
    msg = str(err.value)
    assert "patches.example" in msg and f"DGL {found}" in msg and "2.1.x" in msg
    assert isinstance(err.value, RuntimeError)
