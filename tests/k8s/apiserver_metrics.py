"""The API server's own count of what it serves (its /metrics endpoint, read as admin): the
long-running requests open now (watches, followed logs) and the requests served so far, so
tests and benchmarks measure distrun's load where the cluster feels it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class ApiServerLoad:
    open_streams: Counter[tuple[str, str, str]]  # (verb, resource, subresource) -> open now
    requests: Counter[tuple[str, str, str]]  # (verb, resource, subresource) -> served so far

    def log_streams(self) -> int:
        """Pod logs being read now (followed, or a long read in progress)."""
        return sum(
            n for (_, res, sub), n in self.open_streams.items() if (res, sub) == ("pods", "log")
        )

    def watches(self, resource: str) -> int:
        return self.open_streams[("WATCH", resource, "")]

    def requests_since(self, earlier: ApiServerLoad) -> int:
        return sum((self.requests - earlier.requests).values())

    def busiest_since(self, earlier: ApiServerLoad, count: int = 4) -> list[tuple[str, int]]:
        """The kinds of request served most since `earlier`: ("GET pods/log", 12), ..."""
        served = self.requests - earlier.requests
        return [
            (f"{verb} {resource}{'/' + sub if sub else ''}", n)
            for (verb, resource, sub), n in served.most_common(count)
        ]


async def apiserver_load(admin: Any) -> ApiServerLoad:
    """`admin`: a kubernetes_asyncio ApiClient with the right to GET /metrics."""
    response = await admin.call_api(
        "/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False
    )
    text = (await response.read()).decode()
    return parse_load(text)


def parse_load(text: str) -> ApiServerLoad:
    open_streams: Counter[tuple[str, str, str]] = Counter()
    requests: Counter[tuple[str, str, str]] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            key = (
                labels.get("verb", ""),
                labels.get("resource", ""),
                labels.get("subresource", ""),
            )
            if sample.name == "apiserver_longrunning_requests":
                open_streams[key] += int(sample.value)
            elif sample.name == "apiserver_request_total":
                requests[key] += int(sample.value)
    return ApiServerLoad(open_streams, requests)
