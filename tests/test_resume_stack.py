"""A resume continues on the software the partial started with: the compiled trial's build is
compared by its identity (sources, tools, flags, trial code), not by when or from which kit commit
the build script ran (the 2026-12-01 OpenNN rebuild on a twin H200 was refused for that)."""
import copy

import pytest

from kitctl.errors import Fail
from kitctl.run.resume import build_identity, check_same_stack

BUILD = {"opennn_commit": "5ffbaa6", "sources": {"opennn": "5ffbaa6", "zlib": "51b7f2a"},
         "nvcc": "13.0", "cuda_archs": "90", "lto": "OFF",
         "stage_seconds": {"opennn": 97.8}, "total_seconds": 122.0, "built_at": "2026-12-01T05:46:37Z",
         "kit": {"git_commit": "f650a6b", "git_dirty": False, "git_source": "stamp",
                 "trial_code": {"sha256": "c9fe58", "files": 24}}}


class _Described:
    """The one method of a Runtime that check_same_stack reads."""
    name = "local"

    def __init__(self, info):
        self.info = info

    def describe(self, engine):
        return {"interpreter": None, "trial": "trials/opennn", "build_info": self.info}


class _Engine:
    name = "opennn-resident"


def _doc(info):
    return {"engines": {"opennn-resident": {"provenance": {"trial": "trials/opennn", "build_info": info}}}}


def test_a_rebuild_of_the_same_sources_elsewhere_is_the_same_software():
    again = copy.deepcopy(BUILD)
    again.update(built_at="2026-12-01T10:28:15Z", total_seconds=123.2, stage_seconds={"opennn": 98.0})
    again["kit"].update(git_commit="1381db7")
    assert build_identity(again) == build_identity(BUILD)
    check_same_stack(_doc(BUILD), _Described(again), [_Engine()])


@pytest.mark.parametrize("change", [("sources", {"opennn": "other", "zlib": "51b7f2a"}), ("lto", "ON"),
                                    ("cuda_archs", "80;90")])
def test_other_sources_or_flags_are_refused_naming_the_difference(change):
    other = copy.deepcopy(BUILD)
    other[change[0]] = change[1]
    with pytest.raises(Fail, match=rf"another build_info \({change[0]} "):
        check_same_stack(_doc(BUILD), _Described(other), [_Engine()])


def test_other_trial_code_is_refused():
    other = copy.deepcopy(BUILD)
    other["kit"]["trial_code"] = {"sha256": "different", "files": 24}
    with pytest.raises(Fail, match="kit"):
        check_same_stack(_doc(BUILD), _Described(other), [_Engine()])
