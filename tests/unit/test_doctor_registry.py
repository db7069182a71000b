"""A doctor check's area is the start of its id: one name, stated once."""

from __future__ import annotations

import pytest

from dlrig import doctor
from dlrig.doctor.registry import AREAS, check


def test_every_check_sits_in_the_area_its_id_names():
    for entry in doctor.all_checks():
        assert entry.area == entry.id.partition(".")[0], entry.id
        assert entry.area in AREAS


def test_an_id_outside_the_areas_is_refused_at_registration():
    with pytest.raises(ValueError, match="unknown area 'gpus'"):
        check("gpus.typo", "a check filed under an area that does not exist")
