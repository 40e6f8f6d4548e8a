#!/usr/bin/python3
"""Parses Prometheus text exposition (format 0.0.4) with the reference Python client's parser
and prints its samples as one JSON object, for the C++ tests to assert on.

Usage: parse_prometheus.py IN OUT
  OUT:    {"families": {name: type}, "samples": {"name{a=\"x\",b=\"y\"}": value}} where the
          labels are sorted by name and values are floats ("+Inf"/"NaN" as strings).
  exit 0: parsed, and every histogram is consistent (buckets cumulative and non-decreasing in
          le, an le="+Inf" bucket equal to _count, a _sum); every sample belongs to a family
          that has HELP and TYPE lines.
  exit 1: the parser refused the text, or a check failed (the reason on stderr).
  exit 77: prometheus_client is not installed (Debian: python3-prometheus-client); the caller
          skips with that message.
"""
import json
import math
import sys

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("prometheus_client is not installed (apt-get install python3-prometheus-client, "
          "or run deploy/install-deps.sh)", file=sys.stderr)
    sys.exit(77)


def key(name, labels):
    inner = ",".join('%s="%s"' % (k, labels[k]) for k in sorted(labels))
    return name + ("{" + inner + "}" if inner else "")


def number(v):
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return v


def check_text(text):
    """What the parser tolerates but the format requires."""
    helped, typed = set(), set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split(" ")[2])
        elif line.startswith("# TYPE "):
            typed.add(line.split(" ")[2])
    if helped != typed:
        raise ValueError("HELP and TYPE lines name different families: %s"
                         % sorted(helped ^ typed))
    if not text.endswith("\n"):
        raise ValueError("the text does not end with a newline")
    return typed


def check_histogram(family):
    series = {}
    for s in family.samples:
        labels = {k: v for k, v in s.labels.items() if k != "le"}
        entry = series.setdefault(key("", labels), {"buckets": [], "count": None, "sum": None})
        if s.name.endswith("_bucket"):
            entry["buckets"].append((float(s.labels["le"]), s.value))
        elif s.name.endswith("_count"):
            entry["count"] = s.value
        elif s.name.endswith("_sum"):
            entry["sum"] = s.value
    for labels, e in series.items():
        b = e["buckets"]
        if not b or not math.isinf(b[-1][0]):
            raise ValueError("%s%s: no le=\"+Inf\" bucket last" % (family.name, labels))
        for (le0, c0), (le1, c1) in zip(b, b[1:]):
            if le1 <= le0 or c1 < c0:
                raise ValueError("%s%s: buckets not cumulative at le=%s" % (family.name, labels, le1))
        if e["count"] is None or e["sum"] is None:
            raise ValueError("%s%s: no _count or _sum" % (family.name, labels))
        if b[-1][1] != e["count"]:
            raise ValueError("%s%s: +Inf bucket %s != _count %s"
                             % (family.name, labels, b[-1][1], e["count"]))


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        text = f.read()
    try:
        typed = check_text(text)
        families, samples = {}, {}
        for fam in text_string_to_metric_families(text):
            families[fam.name] = fam.type
            if fam.type == "histogram":
                check_histogram(fam)
            for s in fam.samples:
                samples[key(s.name, s.labels)] = number(s.value)
        # The parser names a counter family without _total; the TYPE line names it with.
        for name, typ in families.items():
            if name not in typed and name + "_total" not in typed:
                raise ValueError("family %s has no TYPE line" % name)
    except ValueError as e:
        print("not valid Prometheus text: %s" % e, file=sys.stderr)
        sys.exit(1)
    with open(sys.argv[2], "w", encoding="utf-8") as out:
        json.dump({"families": families, "samples": samples}, out, sort_keys=True)


if __name__ == "__main__":
    main()
