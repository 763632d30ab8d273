import copy
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def smoke_config():
    """A fresh, unvalidated copy of config/smoke.yaml."""
    return copy.deepcopy(yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text()))
