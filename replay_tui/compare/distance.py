"""How far apart two runs' results are, as one pair of numbers: the largest metric gap
(finals and every history point, timing metrics aside) and the largest relative L2 of a
checkpoint tensor.  The noise floor of ``replay --times N`` and bisect's judgement of a
probe both measure with these.
"""

from __future__ import annotations

from replay_tui.compare.metrics import is_timing_metric
from storage.manifest import RunManifest
from storage.objects import ObjectStore


def metric_gap(a: RunManifest, b: RunManifest) -> float:
    gap = 0.0
    ma, mb = a.outputs.metrics, b.outputs.metrics
    for name in set(ma) & set(mb):
        if not is_timing_metric(name):
            gap = max(gap, abs(ma[name] - mb[name]))
    ha, hb = a.outputs.metric_history, b.outputs.metric_history
    for name in set(ha) & set(hb):
        if is_timing_metric(name):
            continue
        other: dict[int, list[float]] = {}
        for step, v in hb[name]:
            other.setdefault(step, []).append(v)
        seen: dict[int, int] = {}
        for step, v in ha[name]:
            k = seen.get(step, 0)
            seen[step] = k + 1
            vals = other.get(step)
            if vals is not None and k < len(vals):
                gap = max(gap, abs(v - vals[k]))
    return gap


def weight_rel_l2(a: RunManifest, b: RunManifest, objects: ObjectStore | None) -> float:
    worst = 0.0
    if objects is None:
        return worst
    arts_b = {x.path: x for x in b.outputs.artifacts}
    for x in a.outputs.artifacts:
        y = arts_b.get(x.path)
        if x.kind != "checkpoint" or y is None or not x.sha256 or not y.sha256:
            continue
        if x.sha256 == y.sha256 or (x.tensor_sha256 and x.tensor_sha256 == y.tensor_sha256):
            continue
        pa, pb = objects.get(x.sha256), objects.get(y.sha256)
        if pa is None or pb is None:
            continue
        from replay_tui.compare.tensors import compare_checkpoints

        try:
            diff = compare_checkpoints(pa, pb).to_dict()
        except Exception:  # an unreadable checkpoint: the metrics still speak
            continue
        for t in diff.get("tensors", []):
            v = t.get("rel_l2")
            if isinstance(v, int | float):
                worst = max(worst, float(v))
    return worst
