import re

import pytest

from distrun.core.errors import NotFound
from distrun.core.jobids import MAX_JOB_ID_LENGTH, check_job_id, new_job_id

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@pytest.mark.parametrize(
    ("name", "prefix"),
    [
        ("train", "train-"),
        ("My Model_v2", "my-model-v2-"),
        ("42-answers", "job-42-answers-"),
        ("---", "job-"),
        ("a" * 60, "a" * 34 + "-"),
    ],
)
def test_new_job_id_is_a_short_dns_label_made_from_the_name(name: str, prefix: str) -> None:
    job_id = new_job_id(name)
    assert job_id.startswith(prefix) and len(job_id) == len(prefix) + 5
    assert DNS_1035.match(job_id) and len(job_id) <= MAX_JOB_ID_LENGTH
    assert check_job_id(job_id) == job_id


def test_new_job_ids_differ() -> None:
    assert len({new_job_id("job") for _ in range(200)}) == 200


@pytest.mark.parametrize(
    "bad",
    ["", "../etc", "a/b", "Upper-abcde", "ends-with-", "1starts-with-digit", "x" * 41, None, 7],
)
def test_check_job_id_rejects_anything_that_is_not_an_id(bad: object) -> None:
    with pytest.raises(NotFound, match="^no job "):
        check_job_id(bad)
