"""Reading Prometheus text (the reward server's ``/metrics``) in tests, with ``prometheus_client``'s own parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def metric_families(text: str) -> dict[str, str]:
    """``{family name: type}`` (a counter's family name has no ``_total``)."""
    return {family.name: family.type for family in text_string_to_metric_families(text)}


def metric_series(text: str, name: str) -> list[tuple[dict, float]]:
    """Every sample called ``name`` (e.g. ``miescore_requests_total``) as ``(labels, value)``."""
    return [(dict(sample.labels), sample.value) for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name == name]


def metric_value(text: str, name: str, **labels) -> float:
    """The value of the sample ``name`` with exactly ``labels``; KeyError when there is no such series."""
    for series_labels, value in metric_series(text, name):
        if series_labels == labels:
            return value
    raise KeyError(f"no sample {name}{labels} in the exposition")
